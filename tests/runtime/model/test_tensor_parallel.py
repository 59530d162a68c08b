"""Tensor parallelism over gloo on the CPU: how heads split, and the offline Engine at
tp_size 2 giving the outputs of tp_size 1 (greedy fp32 text identical, logprobs within 1e-4)
on tiny random models with 4 KV heads and with 1 (replicated), and on SmolLM2 (9 heads, 3 KV
heads: an uneven split), through chunked prefill, prefix-cache hits and constraints."""

import types

import pytest

from runtime.engine import Engine
from runtime.model.parallel import check_shapes, head_shard
from tests.runtime.conftest import make_tiny_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "List three colours: red,",
    "Once upon a time, in a city by the sea, there lived",
]


def _cfg(heads: int, kv: int, inter: int = 1536):
    return types.SimpleNamespace(num_heads=heads, num_kv_heads=kv, intermediate_size=inter)


@pytest.mark.parametrize(
    "heads,kv,tp", [(9, 3, 2), (9, 3, 3), (4, 4, 2), (4, 1, 2), (8, 2, 4), (32, 8, 4), (6, 3, 2)]
)
def test_every_head_lives_on_exactly_one_rank_with_the_kv_heads_it_reads(heads, kv, tp):
    check_shapes(_cfg(heads, kv), tp)
    group = heads // kv
    owners = []
    for rank in range(tp):
        s = head_shard(_cfg(heads, kv), rank, tp)
        assert s.q_heads >= 1 and s.kv_heads >= 1
        assert s.q_heads % s.kv_heads == 0  # one group size on the rank
        local_group = s.q_heads // s.kv_heads
        for j in range(s.q_heads):
            q = s.q_start + j
            assert q // group == s.kv_start + j // local_group  # reads its own KV head
            owners.append(q)
    assert sorted(owners) == list(range(heads))


@pytest.mark.parametrize(
    "cfg,tp,words",
    [
        (_cfg(4, 2), 4 * 3, "KV heads"),
        (_cfg(4, 2), 8, "KV heads"),
        (_cfg(4, 4, inter=130), 4, "MLP"),
    ],
)
def test_a_model_that_cannot_split_is_refused_by_name(cfg, tp, words):
    with pytest.raises(ValueError, match=words):
        check_shapes(cfg, tp)


def _engine(folder: str, tp: int, **kw) -> Engine:
    settings = dict(
        model_path=folder,
        tp_size=tp,
        dtype="float32",
        quantization="none",
        cpu_threads=1,
        max_total_tokens=4096,
        log_level="warning",
        grammar_compile_timeout=120,  # a loaded machine: this is not what the test measures
    )
    return Engine(**{**settings, **kw})


def _run(folder: str, tp: int, full: bool = True, **kw) -> list[list[dict]]:
    """What one engine answers to the test's requests, in order (`full`: all of them, else
    one batch)."""
    engine = _engine(folder, tp, **kw)
    try:
        greedy = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
        first = engine.generate(PROMPTS, greedy, return_logprob=True, top_logprobs_num=2)
        if not full:
            return [first]
        shared = "You are a helpful assistant. Answer in one short sentence. " * 6
        outs = [
            first,
            # a long shared prefix, then hits on it (the slot table grows on rank 0 only)
            engine.generate([shared + "Hello", shared + "Bye"], greedy, return_logprob=True),
            [engine.generate(shared + "What is two plus two?", greedy, return_logprob=True)],
        ]
        constrained = {"max_new_tokens": 24, "temperature": 0, "regex": r"\{\"n\": [0-9]{1,4}\}"}
        outs.append([engine.generate("A JSON object:", constrained, return_logprob=True)])
        outs.append(engine.generate(PROMPTS[:2], {"max_new_tokens": 8, "temperature": 0.8}))
        assert engine.get_stats()["cached_prompt_tokens"] > 0
        return outs
    finally:
        engine.shutdown()


def _assert_same(one: list[list[dict]], two: list[list[dict]]) -> None:
    for batch_one, batch_two in zip(one, two):
        for a, b in zip(batch_one, batch_two):
            assert a["text"] == b["text"]
            lp_a = a["meta_info"].get("output_token_logprobs")
            if lp_a is None:  # sampled: same seedless sampler, same logits to 1e-4
                continue
            lp_b = b["meta_info"]["output_token_logprobs"]
            assert [t[1] for t in lp_a] == [t[1] for t in lp_b]
            assert max(abs(x[0] - y[0]) for x, y in zip(lp_a, lp_b)) < 1e-4
            for ta, tb in zip(
                a["meta_info"].get("output_top_logprobs") or [],
                b["meta_info"].get("output_top_logprobs") or [],
            ):
                assert [t[1] for t in ta] == [t[1] for t in tb]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, smollm2_folder) -> dict:
    out = {}
    for kv in (4, 1):
        folder = str(tmp_path_factory.mktemp(f"tp-kv{kv}"))
        out[kv] = make_tiny_model(
            folder, smollm2_folder, "llama", num_attention_heads=4, num_key_value_heads=kv
        )
    return out


@pytest.mark.parametrize("kv_heads", [4, 1])
def test_tp2_equals_tp1_on_a_tiny_model(tiny_models, kv_heads):
    kw = {"chunked_prefill_size": 32}  # the shared prefix prefills in several chunks
    _assert_same(_run(tiny_models[kv_heads], 1, **kw), _run(tiny_models[kv_heads], 2, **kw))


def _tight(folder: str, tp: int) -> tuple[list[list[int]], dict]:
    """Eight 40-token answers in a pool of 200 slots: decodes are retracted and resumed."""
    engine = _engine(folder, tp, max_total_tokens=200, chunked_prefill_size=16)
    try:
        greedy = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
        outs = engine.generate([p + f" ({i})" for i, p in enumerate(PROMPTS * 2)], greedy)
        return [o["output_ids"] for o in outs], engine.get_stats()
    finally:
        engine.shutdown()


def test_tp2_equals_tp1_when_requests_are_retracted(tiny_models):
    (one, stats_one), (two, stats_two) = _tight(tiny_models[4], 1), _tight(tiny_models[4], 2)
    assert one == two
    assert stats_two["retractions"] == stats_one["retractions"] > 0


def test_tp2_equals_tp1_on_smollm2(smollm2_folder):
    _assert_same(_run(smollm2_folder, 1, full=False), _run(smollm2_folder, 2, full=False))


def test_quantized_weights_with_tp_are_refused_and_auto_runs_floats():
    from runtime.model.loader import gguf_file
    from runtime.model.quantization import QuantizationError
    from runtime.model.runner import pick_quantization

    gguf = gguf_file("smollm2")
    assert pick_quantization("auto", "cpu", gguf, 1) == "int4"
    assert pick_quantization("auto", "cpu", gguf, 2) is None
    with pytest.raises(QuantizationError, match="tp-size 2"):
        pick_quantization("int4", "cpu", gguf, 2)


def test_an_engine_that_fails_to_start_leaves_no_rank_running(tmp_path):
    import multiprocessing

    with pytest.raises((OSError, ValueError, RuntimeError)):
        Engine(model_path=str(tmp_path / "missing"), tp_size=2, log_level="warning")
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("radixgen-tp")]
