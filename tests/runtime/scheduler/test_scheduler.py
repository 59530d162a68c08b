"""Scheduling with the radix cache: same greedy outputs under every configuration, memory
accounting after any workload, and cache reuse across requests."""

import random

import pytest

from runtime import Engine
from runtime.sampling.params import SamplingParams
from runtime.scheduler.req import Req

SHARED = (
    "You are a careful assistant. You answer questions about geography, history and science "
    "with short factual sentences. Always name the country or field first, then the answer. "
    "Here are the rules of the game: never invent facts, never repeat the question, and keep "
    "every answer under twenty words.\n"
)
QUESTIONS = [
    "Q: What is the capital of France?\nA:",
    "Q: What is the capital of Italy?\nA:",
    "Q: Who wrote Hamlet?\nA:",
    "Q: What is the boiling point of water?\nA:",
    "Q: What is the largest planet?\nA:",
    "Q: Name a famous river in Egypt.\nA:",
]
PROMPTS = [SHARED + q for q in QUESTIONS] + ["Count to five: one, two,", "The opposite of hot is"]
GREEDY = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}


def run(**kwargs):
    # same outputs under every configuration: decode rows that do not depend on their batch
    engine = Engine(
        model_path="smollm2",
        dtype="float32",
        log_level="warning",
        enable_deterministic_inference=True,
        **kwargs,
    )
    outs = engine.generate(PROMPTS, GREEDY)
    again = engine.generate(PROMPTS[:3], GREEDY)  # served from the cache when it is on
    stats = engine.get_stats()
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]
    engine.shutdown()
    return [o["output_ids"] for o in outs] + [o["output_ids"] for o in again], stats, outs


@pytest.fixture(scope="module")
def reference():
    ids, stats, _ = run(disable_radix_cache=True, chunked_prefill_size=-1, max_total_tokens=8192)
    assert stats["cached_prompt_tokens"] == 0
    return ids


@pytest.mark.parametrize("chunk", [16, 64, -1])
def test_same_outputs_with_cache_and_chunk_sizes(reference, chunk):
    ids, stats, outs = run(chunked_prefill_size=chunk, max_total_tokens=8192)
    assert ids == reference
    assert stats["cached_prompt_tokens"] > 0
    assert outs[1]["meta_info"]["cached_tokens"] > 0


SLOW = pytest.mark.slow  # kept out of `make test` for time (the suite's 20-minute budget)


@pytest.mark.parametrize(
    "policy",
    ["lpm", "fcfs", *(pytest.param(p, marks=SLOW) for p in ("dfs-weight", "lof", "random"))],
)
def test_same_outputs_with_each_policy(reference, policy):
    ids, _, _ = run(schedule_policy=policy, chunked_prefill_size=64, max_total_tokens=8192)
    assert ids == reference


def test_same_outputs_when_memory_is_tight(reference):
    # a pool far smaller than the workload: the tree is evicted and decodes are retracted
    ids, stats, _ = run(max_total_tokens=240, chunked_prefill_size=32, max_running_requests=8)
    assert ids == reference
    assert stats["retractions"] > 0
    assert stats["evicted_tokens"] > 0


def test_same_outputs_without_cache_in_a_small_pool(reference):
    ids, stats, _ = run(disable_radix_cache=True, max_total_tokens=200, chunked_prefill_size=32)
    assert ids == reference


def test_pool_is_whole_after_aborts():
    engine = Engine(
        model_path="smollm2", dtype="float32", max_total_tokens=2048, log_level="warning"
    )
    sch = engine.scheduler
    rng = random.Random(0)
    reqs = []
    for i in range(10):
        ids = engine.tokenizer.encode(PROMPTS[i % len(PROMPTS)]) + [rng.randrange(20, 1000)]
        req = Req(f"r{i}", ids, SamplingParams(max_new_tokens=rng.randint(1, 30), temperature=0.7))
        sch.add_request(req)
        reqs.append(req)
    for step in range(12):
        sch.step()
        if step == 3:
            assert sch.abort("r0") and sch.abort("r9")  # one running, one still waiting
    assert sch.abort("r5") or reqs[5].finished
    while sch.has_work():
        sch.step()
    assert all(r.finished for r in reqs)
    assert reqs[0].finished_reason.type == "abort"
    stats = engine.get_stats()
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]
    assert stats["protected"] == 0
    assert sch.flush_cache()
    assert engine.get_stats()["kv_free"] == stats["kv_pool_size"]


def test_shared_500_token_prefix_is_reused():
    engine = Engine(model_path="smollm2", log_level="warning", max_total_tokens=8192)
    rng = random.Random(1)
    prefix = [rng.randrange(20, 40000) for _ in range(500)]
    first = engine.generate(input_ids=prefix + [101, 102], sampling_params={"max_new_tokens": 1})
    second = engine.generate(
        input_ids=prefix + [201, 202, 203], sampling_params={"max_new_tokens": 1}
    )
    assert first["meta_info"]["cached_tokens"] == 0
    assert second["meta_info"]["cached_tokens"] >= 500
    assert second["meta_info"]["ttft"] < first["meta_info"]["ttft"]


def test_prefill_only_requests_warm_the_cache():
    engine = Engine(model_path="smollm2", log_level="warning", max_total_tokens=4096)
    engine.generate(SHARED, {"max_new_tokens": 0})
    out = engine.generate(SHARED + QUESTIONS[0], {"max_new_tokens": 4})
    assert out["meta_info"]["cached_tokens"] >= len(engine.tokenizer.encode(SHARED)) - 2


def test_input_logprobs_with_a_cached_prefix():
    engine = Engine(
        model_path="smollm2", dtype="float32", log_level="warning", max_total_tokens=4096
    )
    cold = engine.generate(SHARED, {"max_new_tokens": 1}, return_logprob=True, logprob_start_len=0)
    warm = engine.generate(SHARED, {"max_new_tokens": 1}, return_logprob=True, logprob_start_len=0)
    a = [lp for lp, _, _ in cold["meta_info"]["input_token_logprobs"][1:]]
    b = [lp for lp, _, _ in warm["meta_info"]["input_token_logprobs"][1:]]
    assert len(a) == len(b) == len(engine.tokenizer.encode(SHARED)) - 1
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
