"""Jump-forward in the scheduler, on SmolLM2: fewer forward steps, valid output either way, KV
accounting whole after jumps that roll back into cached prefixes, structural tags."""

import json
import os

import pytest

from runtime import Engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CHARACTER = {
    "type": "object",
    "properties": {
        "character_full_name": {"type": "string", "maxLength": 16},
        "character_class_or_profession": {"enum": ["warrior", "wizard", "rogue"]},
        "maximum_hit_points_value": {"type": "integer", "minimum": 1, "maximum": 999},
        "character_is_currently_alive": {"type": "boolean"},
    },
    "required": [
        "character_full_name",
        "character_class_or_profession",
        "maximum_hit_points_value",
        "character_is_currently_alive",
    ],
    "additionalProperties": False,
}
PROMPT = "<|im_start|>user\nDescribe a game character as JSON.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def engine():
    e = Engine(model_path="smollm2", dtype="float32", max_total_tokens=4096)
    yield e
    e.shutdown()


def _run(engine, disable: bool, params: dict, prompt: str = PROMPT):
    engine.scheduler.args.disable_jump_forward = disable
    steps = engine.get_stats()["forward_steps"]
    try:
        out = engine.generate(prompt, params)
    finally:
        engine.scheduler.args.disable_jump_forward = False
    return out, engine.get_stats()["forward_steps"] - steps


def _assert_pool_whole(engine):
    stats = engine.get_stats()
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]
    assert stats["protected"] == 0


def test_jump_forward_saves_steps_and_both_outputs_are_valid(engine):
    params = {"json_schema": json.dumps(CHARACTER), "max_new_tokens": 120, "temperature": 0}
    on, steps_on = _run(engine, False, params)
    off, steps_off = _run(engine, True, params)
    for out in (on, off):
        doc = json.loads(out["text"])
        assert set(doc) == set(CHARACTER["required"])
        assert doc["character_class_or_profession"] in ("warrior", "wizard", "rogue")
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert on["meta_info"]["jump_forward_tokens"] > 10
    assert off["meta_info"]["jump_forward_tokens"] == 0
    assert steps_on < steps_off
    _assert_pool_whole(engine)


def test_jumps_with_sampling_batches_and_a_shared_cached_prefix(engine):
    """Eight sampled requests share a prompt (in the radix cache); their jumps roll back into
    outputs already inserted in the tree; every output stays valid and no slot leaks."""
    params = {
        "json_schema": CHARACTER,
        "max_new_tokens": 120,
        "temperature": 1.0,
        "seed": 11,
        "n": 8,
    }
    outs = engine.generate(PROMPT, params)
    finished = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "stop"]
    assert finished
    for out in finished:
        json.loads(out["text"])
    assert sum(o["meta_info"]["jump_forward_tokens"] for o in outs) > 0
    assert engine.get_stats()["jump_forward_tokens"] > 0
    _assert_pool_whole(engine)


def test_regex_and_ebnf_jump_forward(engine):
    out, _ = _run(
        engine,
        False,
        {"regex": r"Answer: (yes|no), because the sky is blue\.", "max_new_tokens": 30},
        "Is the sky blue?",
    )
    assert out["text"] in (
        "Answer: yes, because the sky is blue.",
        "Answer: no, because the sky is blue.",
    )
    assert out["meta_info"]["jump_forward_tokens"] > 0
    grammar = 'start: "result = " N " + " N ";"\nN: /[0-9]{1,2}/'
    out, _ = _run(engine, False, {"ebnf": grammar, "max_new_tokens": 20}, "Write a sum:")
    assert out["text"].startswith("result = ") and out["text"].endswith(";")
    assert out["meta_info"]["jump_forward_tokens"] > 0


def test_logprob_requests_do_not_jump(engine):
    out = engine.generate(
        "Is the sky blue?",
        {"regex": r"Answer: (yes|no), because\.", "max_new_tokens": 20},
        return_logprob=True,
    )
    meta = out["meta_info"]
    assert meta["jump_forward_tokens"] == 0
    assert len(meta["output_token_logprobs"]) == meta["completion_tokens"]


def test_structural_tag_leaves_text_free_until_the_trigger(engine):
    tag = {
        "structures": [
            {
                "begin": '<tool_call>{"name": "get_weather", "arguments": ',
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 12}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "end": "}</tool_call>",
            }
        ],
        "triggers": ["<tool_call>"],
    }
    shot = '<tool_call>{"name": "get_weather", "arguments": {"city": "%s"}}</tool_call>\n'
    prompt = f"Q: weather in Paris?\nA: {shot % 'Paris'}Q: weather in Rome?\nA: {shot % 'Rome'}"
    out = engine.generate(
        prompt + "Q: weather in Oslo?\nA:",
        {"structural_tag": tag, "max_new_tokens": 40, "temperature": 0},
    )
    text = out["text"]
    assert "<tool_call>" in text, text
    call = text[text.index("<tool_call>") :]
    assert call.startswith('<tool_call>{"name": "get_weather", "arguments": {"city": "')
    assert out["meta_info"]["jump_forward_tokens"] > 0
    if out["meta_info"]["finish_reason"]["type"] == "stop":
        body = call[len('<tool_call>{"name": "get_weather", "arguments": ') :]
        assert json.loads(body[: body.index("}</tool_call>")])["city"]
    out = engine.generate(
        "Say hi.", {"structural_tag": json.dumps(tag), "max_new_tokens": 8, "temperature": 0}
    )
    assert "<tool_call>" not in out["text"]  # never opened: plain text passes
    with pytest.raises(ValueError, match="structural_tag"):
        engine.generate("x", {"structural_tag": {"structures": [], "triggers": []}})


def test_unbounded_integers_end_at_the_default_digit_bound(engine):
    """A model that would write "1" forever (a +100 logit bias) still ends an integer of an
    unbounded schema at --json-number-digits (default 20) digits, with a valid document."""
    one = engine.tokenizer.encode("1", add_special_tokens=False)
    assert len(one) == 1
    params = {
        "json_schema": {"type": "integer"},
        "max_new_tokens": 48,
        "temperature": 0,
        "logit_bias": {str(one[0]): 100},
    }
    out = engine.generate("A large number: ", params)
    assert out["meta_info"]["finish_reason"]["type"] == "stop", out
    assert json.loads(out["text"]) == int("1" * 20)
