"""Offline Engine on SmolLM2: greedy parity with transformers, batching, sampling and logprobs."""

import math

import pytest
import torch

from runtime import Engine

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.\n",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Once upon a time, in a small village at the edge of a dark forest, there lived an old "
    "woodcutter and his three children. Every morning",
]


@pytest.fixture(scope="module")
def engine():
    e = Engine(model_path="smollm2", dtype="float32", quantization="none", max_total_tokens=8192)
    yield e
    e.shutdown()


GREEDY = {"max_new_tokens": 32, "temperature": 0}


def test_capital_of_france(engine):
    out = engine.generate("The capital of France is", {"max_new_tokens": 8, "temperature": 0})
    assert "Paris" in out["text"]
    meta = out["meta_info"]
    assert meta["prompt_tokens"] == 5 and meta["completion_tokens"] == 8
    assert meta["finish_reason"] == {"type": "length", "length": 8}


def test_greedy_matches_transformers_generate(engine, smollm2_folder):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32).eval()
    batch = engine.generate(PROMPTS, GREEDY)  # one batch, mixed prompt lengths
    for prompt, out in zip(PROMPTS, batch):
        ids = engine.tokenizer.encode(prompt)
        with torch.no_grad():
            ref = hf.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[
                0, len(ids) :
            ]
        assert out["output_ids"] == ref.tolist(), prompt
        alone = engine.generate(prompt, GREEDY)
        assert alone["output_ids"] == out["output_ids"]


def test_list_in_list_out_and_input_ids(engine):
    outs = engine.generate(["a", "b", "c"], {"max_new_tokens": 4, "temperature": 0})
    assert isinstance(outs, list) and len(outs) == 3
    ids = engine.tokenizer.encode("The capital of France is")
    by_ids = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 8, "temperature": 0})
    by_text = engine.generate("The capital of France is", {"max_new_tokens": 8, "temperature": 0})
    assert by_ids["output_ids"] == by_text["output_ids"]


def test_seed_reproduces_and_differs(engine):
    sp = {"max_new_tokens": 16, "temperature": 1.0, "seed": 1234}
    a = engine.generate("Tell me a story.", sp)
    b = engine.generate("Tell me a story.", sp)
    c = engine.generate("Tell me a story.", {**sp, "seed": 99})
    assert a["output_ids"] == b["output_ids"]
    assert a["output_ids"] != c["output_ids"]
    # a seeded request gives the same tokens when batched with other requests
    batched = engine.generate(["Hello there", "Tell me a story."], [{"max_new_tokens": 8}, sp])
    assert batched[1]["output_ids"] == a["output_ids"]


def test_top_k_one_equals_greedy(engine):
    greedy = engine.generate(PROMPTS[1], {"max_new_tokens": 16, "temperature": 0})
    topk1 = engine.generate(PROMPTS[1], {"max_new_tokens": 16, "temperature": 0.8, "top_k": 1})
    assert topk1["output_ids"] == greedy["output_ids"]


def test_tiny_top_p_and_min_p_pick_the_argmax(engine):
    greedy = engine.generate(PROMPTS[0], {"max_new_tokens": 8, "temperature": 0})
    for extra in ({"top_p": 1e-6}, {"min_p": 1.0}):
        out = engine.generate(PROMPTS[0], {"max_new_tokens": 8, "temperature": 1.0, **extra})
        assert out["output_ids"] == greedy["output_ids"], extra


def test_logprobs_full_distribution_sums_to_one(engine):
    vocab = engine.scheduler.vocab_size
    out = engine.generate(
        "The capital of France is",
        {"max_new_tokens": 3, "temperature": 0},
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=vocab,
    )
    meta = out["meta_info"]
    for top in meta["output_top_logprobs"] + meta["input_top_logprobs"][1:]:
        assert len(top) == vocab
        assert math.isclose(sum(math.exp(lp) for lp, _, _ in top), 1.0, rel_tol=1e-3)
    # greedy picks the most likely token; its logprob equals the top alternative's
    for (lp, tid, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert tid == top[0][1] and math.isclose(lp, top[0][0], abs_tol=1e-5)
    prompt_ids = engine.tokenizer.encode("The capital of France is")
    assert [t for _, t, _ in meta["input_token_logprobs"]] == prompt_ids
    assert meta["input_token_logprobs"][0][0] is None


def test_input_logprobs_match_a_direct_forward(engine, smollm2_folder):
    from transformers import AutoModelForCausalLM

    text = "Paris is the capital and largest city of France."
    ids = engine.tokenizer.encode(text)
    out = engine.generate(
        text,
        {"max_new_tokens": 1, "temperature": 0},
        return_logprob=True,
        logprob_start_len=3,
        return_text_in_logprobs=True,
    )
    hf = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)
    got = out["meta_info"]["input_token_logprobs"]
    assert [t for _, t, _ in got] == ids[3:]
    for (lp, tid, txt), pos in zip(got, range(3, len(ids))):
        assert abs(lp - ref[pos - 1, tid].item()) < 1e-3
        assert txt == engine.tokenizer.decode([tid])


def test_penalties_change_the_distribution_as_defined(engine):
    """Logprobs are of the raw distribution; penalties act on what is sampled."""
    from runtime.sampling.params import SamplingParams
    from runtime.sampling.sampler import apply_penalties
    from runtime.scheduler.req import Req

    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    req = Req(
        "r",
        [0],
        SamplingParams(frequency_penalty=0.5, presence_penalty=0.25, repetition_penalty=2.0),
    )
    req.output_ids = [3, 3, 2]
    apply_penalties(logits, [req], [0], vocab=4)
    # token 0: only in the prompt -> repetition penalty only (positive: divided)
    # token 1: unseen -> unchanged
    # token 2: once in output -> 0.5 - 0.5 - 0.25 = -0.25, then * 2 (negative)
    # token 3: twice in output -> 3 - 1.0 - 0.25 = 1.75, then / 2
    assert torch.allclose(logits, torch.tensor([[1.0, -1.0, -0.5, 0.875]]))
    # end to end: a strong repetition penalty stops greedy repetition
    plain = engine.generate("la la la la la la", {"max_new_tokens": 12, "temperature": 0})
    penal = engine.generate(
        "la la la la la la", {"max_new_tokens": 12, "temperature": 0, "repetition_penalty": 2.0}
    )
    assert plain["output_ids"] != penal["output_ids"]

    def most_repeated(ids):
        return max(ids.count(t) for t in ids)

    assert most_repeated(penal["output_ids"]) < most_repeated(plain["output_ids"])


def test_stop_conditions(engine):
    base = engine.generate(PROMPTS[3], {"max_new_tokens": 24, "temperature": 0})
    text = base["text"]
    word = text.split()[3]
    out = engine.generate(PROMPTS[3], {"max_new_tokens": 24, "temperature": 0, "stop": word})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": word}
    assert out["text"] == text[: text.find(word)]
    kept = engine.generate(
        PROMPTS[3], {"max_new_tokens": 24, "temperature": 0, "stop": [word], "no_stop_trim": True}
    )
    assert kept["text"].endswith(word) or word in kept["text"]
    tok = base["output_ids"][5]
    out = engine.generate(
        PROMPTS[3], {"max_new_tokens": 24, "temperature": 0, "stop_token_ids": [tok]}
    )
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": tok}
    assert out["output_ids"][-1] == tok and tok not in out["output_ids"][:-1]


def test_eos_min_new_tokens_and_ignore_eos(engine):
    chat = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    out = engine.generate(chat, {"max_new_tokens": 64, "temperature": 0})
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    n = out["meta_info"]["completion_tokens"]
    longer = engine.generate(
        chat, {"max_new_tokens": 64, "temperature": 0, "min_new_tokens": n + 3}
    )
    assert longer["meta_info"]["completion_tokens"] >= n + 3
    ignored = engine.generate(chat, {"max_new_tokens": n + 5, "temperature": 0, "ignore_eos": True})
    assert ignored["meta_info"]["completion_tokens"] == n + 5


def test_n_returns_n_samples(engine):
    outs = engine.generate("Pick a number:", {"max_new_tokens": 6, "temperature": 1.0, "n": 3})
    assert len(outs) == 3 and len({o["meta_info"]["id"] for o in outs}) == 3


def test_max_new_tokens_zero_only_prefills(engine):
    out = engine.generate("Warm the cache with this prefix.", {"max_new_tokens": 0})
    assert out["output_ids"] == [] and out["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.parametrize(
    "params, field",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"max_new_tokens": -5}, "max_new_tokens"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"n": 0}, "n"),
        ({"stop_token_ids": [10**9]}, "stop_token_ids"),
        ({"bogus": 1}, "bogus"),
        ({"temperature": "hot"}, "temperature"),
        ({"json_schema": '{"type": "array", "uniqueItems": true}'}, "json_schema"),
        ({"json_schema": "{not json"}, "json_schema"),
        ({"regex": "(a"}, "regex"),
        ({"ebnf": "start: missing"}, "ebnf"),
        ({"regex": "a", "ebnf": "start: 'a'"}, "only one"),
    ],
)
def test_invalid_sampling_values_name_the_field(engine, params, field):
    with pytest.raises(ValueError, match=field):
        engine.generate("hi", params)
    assert not engine.scheduler.has_work()


def test_bad_prompts(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.generate(input_ids=[[]], sampling_params={})
    with pytest.raises(ValueError, match="context"):
        engine.generate(input_ids=[1] * 9000, sampling_params={})
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(input_ids=[1, 10**7], sampling_params={})
    assert not engine.scheduler.has_work()
    assert engine.generate("ok", {"max_new_tokens": 1})["meta_info"]["completion_tokens"] == 1


def test_kv_pool_is_whole_after_work(engine):
    engine.generate(PROMPTS, {"max_new_tokens": 8})
    stats = engine.get_stats()
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_constrained_decoding_json_regex_ebnf_choices(engine):
    import json

    prompt = "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n"
    outs = engine.generate(
        [prompt] * 3,
        {"max_new_tokens": 60, "temperature": 0.8, "seed": 3, "json_schema": json.dumps(PERSON)},
    )
    for out in outs:
        doc = json.loads(out["text"])  # complete and valid, ended by EOS
        assert set(doc) == {"name", "age"} and 0 <= doc["age"] <= 120
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    out = engine.generate("Is the sky blue? Answer:", {"max_new_tokens": 8, "regex": " (yes|no)"})
    assert out["text"] in (" yes", " no")
    grammar = 'start: N " + " N\nN: /[0-9]{1,3}/'
    out = engine.generate("Write a sum:", {"max_new_tokens": 16, "ebnf": grammar})
    import re

    assert re.fullmatch(r"\d{1,3} \+ \d{1,3}", out["text"]), out["text"]
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert not engine.scheduler.has_work()


def test_grammars_compile_off_the_scheduler_loop(engine):
    """Constraints compile in a worker thread; a request waits for its grammar, an unusable
    one ends the request with a message instead of stopping the loop."""
    from runtime.sampling.params import SamplingParams
    from runtime.scheduler.req import Req

    sched = engine.scheduler
    ok = Req("ok", [1, 2, 3], SamplingParams(max_new_tokens=4, regex="[0-9]{4}"))
    bad = Req("bad", [1, 2, 3], SamplingParams(max_new_tokens=4, regex="[0-9"))
    plain = Req("plain", [1, 2, 3], SamplingParams(max_new_tokens=4))
    for r in (ok, bad, plain):
        sched.add_request(r)
    assert ok.grammar_future is not None and plain.grammar_future is None
    while not all(r.finished for r in (ok, bad, plain)):
        sched.step()
    assert bad.finished_reason.type == "abort" and "regex" in bad.finished_reason.message
    text = engine.tokenizer.decode(ok.output_ids)
    assert len(text) == 4 and text.isdigit()
    assert len(plain.output_ids) == 4 and not sched.has_work()
