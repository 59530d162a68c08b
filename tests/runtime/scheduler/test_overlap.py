"""Overlap scheduling (runtime.scheduler.overlap): step N+1 planned and launched while step N
runs gives the tokens that steps run one by one give, for every sampling feature, grammars,
failures and aborts, and leaks no KV slot or table row."""

import json

import jsonschema
import pytest

from runtime import Engine, faults
from runtime.sampling.params import SamplingParams
from runtime.scheduler.overlap import OverlapScheduler
from runtime.scheduler.req import Req
from runtime.scheduler.scheduler import Scheduler
from runtime.server_args import ServerArgs

PROMPTS = [
    "Count to five: one, two,",
    "The opposite of hot is",
    "Q: What is the capital of France?\nA:",
    "Write a haiku about rain.",
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
# one request per feature that sampling or finishing reads from the request
MIXED = [
    {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True},
    {"max_new_tokens": 20, "temperature": 0.8, "seed": 7, "top_k": 20, "top_p": 0.9},
    {"max_new_tokens": 16, "temperature": 0, "frequency_penalty": 1.5, "presence_penalty": 0.5},
    {"max_new_tokens": 16, "temperature": 0, "repetition_penalty": 1.3},
    {"max_new_tokens": 24, "temperature": 0, "stop": [","]},
    {"max_new_tokens": 12, "temperature": 0, "min_new_tokens": 10},
    {"max_new_tokens": 1, "temperature": 0},
    {"max_new_tokens": 0},
    {"max_new_tokens": 40, "temperature": 0, "json_schema": json.dumps(SCHEMA)},
    {"max_new_tokens": 24, "temperature": 0, "regex": "(yes|no), because [a-z ]{1,30}\\."},
    # a seeded draw is never spent on a row a jump-forward voided
    {
        "max_new_tokens": 24,
        "temperature": 0.9,
        "seed": 3,
        "regex": "(yes|no), because [a-z ]{1,30}\\.",
    },
]


def engine(schedule: str, **kwargs) -> Engine:
    return Engine(
        model_path="smollm2",
        dtype="float32",
        log_level="warning",
        enable_deterministic_inference=True,  # a row's tokens do not depend on its batch
        overlap_schedule=schedule,
        **{"max_total_tokens": 4096, **kwargs},
    )


def assert_pool_whole(e: Engine) -> None:
    stats = e.get_stats()
    assert stats["running"] == stats["waiting"] == 0
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]
    assert stats["protected"] == 0
    pool = e.scheduler.req_to_token_pool
    assert len(pool.free_rows) == pool.size


@pytest.fixture(scope="module")
def engines():
    pair = {schedule: engine(schedule) for schedule in ("off", "on")}
    yield pair
    for e in pair.values():
        e.shutdown()


def test_the_schedule_option_picks_the_scheduler(engines):
    assert type(engines["on"].scheduler) is OverlapScheduler
    assert type(engines["off"].scheduler) is Scheduler
    with pytest.raises(ValueError, match="overlap_schedule"):
        ServerArgs(overlap_schedule="always")


@pytest.mark.parametrize(
    "schedule, device, tp, picked",
    [
        ("auto", "cpu", 1, "plain"),
        ("auto", "cuda", 1, "overlap"),
        ("on", "cpu", 1, "overlap"),
        ("off", "cuda", 1, "plain"),
        ("on", "cuda", 2, "plain"),  # tensor-parallel ranks get steps from one thread
    ],
)
def test_auto_overlaps_with_cuda_only(monkeypatch, schedule, device, tp, picked):
    from runtime.scheduler import overlap

    monkeypatch.setattr(overlap, "pick_device", lambda name: device)
    monkeypatch.setattr(overlap, "OverlapScheduler", lambda *a: "overlap")
    monkeypatch.setattr(overlap, "Scheduler", lambda *a: "plain")
    args = ServerArgs(overlap_schedule=schedule, tp_size=tp)
    assert overlap.new_scheduler(args) == picked


def test_every_sampling_feature_gives_the_same_tokens(engines):
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(MIXED))]
    outs = {}
    for schedule, e in engines.items():
        before = e.get_stats()["overlapped_steps"]
        res = e.generate(prompts, MIXED, return_logprob=True, top_logprobs_num=2)
        outs[schedule] = res
        assert_pool_whole(e)
        overlapped = e.get_stats()["overlapped_steps"] - before
        assert overlapped > 0 if schedule == "on" else overlapped == 0
    for off, on in zip(outs["off"], outs["on"]):
        assert on["output_ids"] == off["output_ids"]
        assert on["meta_info"]["finish_reason"] == off["meta_info"]["finish_reason"]
        lp_on = [x[0] for x in on["meta_info"]["output_token_logprobs"]]
        lp_off = [x[0] for x in off["meta_info"]["output_token_logprobs"]]
        assert lp_on == pytest.approx(lp_off, abs=1e-4)
    on = outs["on"]
    assert len(on[5]["output_ids"]) >= 10  # min_new_tokens held although a step was in flight
    assert len(on[6]["output_ids"]) == 1 and on[7]["output_ids"] == []
    jsonschema.validate(json.loads(on[8]["text"]), SCHEMA)


def test_large_batches_run_step_by_step_with_the_same_tokens(engines, monkeypatch):
    """Past OVERLAP_MAX_BATCH running requests, each step lands before the next is planned
    (no step is launched with tokens still pending); below it, steps overlap again."""
    from runtime.scheduler import overlap

    monkeypatch.setattr(overlap, "OVERLAP_MAX_BATCH", 3)
    params = [{"max_new_tokens": n, "temperature": 0, "ignore_eos": True} for n in (6, 6, 6, 6, 24)]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(5)]
    reference = [o["output_ids"] for o in engines["off"].generate(prompts, params)]
    e = engines["on"]
    s = e.scheduler
    launched_large = []
    launch = s._launch

    def watched(plan):
        launched = launch(plan)  # its batch built: the rows whose token is pending are known
        if len(plan) > 3:
            launched_large.append(any(p.pending is not None for p in plan))
        return launched

    monkeypatch.setattr(s, "_launch", watched)
    before = e.get_stats()["overlapped_steps"]
    assert [o["output_ids"] for o in e.generate(prompts, params)] == reference
    assert launched_large and not any(launched_large)  # nothing pending in large steps
    assert e.get_stats()["overlapped_steps"] > before  # the last request alone overlaps
    assert_pool_whole(e)


def test_a_batch_growing_past_the_limit_lands_before_its_first_large_step(engines, monkeypatch):
    """Requests that arrive while a step is in flight and take the batch past
    OVERLAP_MAX_BATCH: that step lands before the large one is planned."""
    from runtime.scheduler import overlap

    monkeypatch.setattr(overlap, "OVERLAP_MAX_BATCH", 3)
    s = engines["on"].scheduler
    sp = SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    first = [Req(f"early{i}", [5 + i, 6, 7], sp) for i in range(3)]
    late = [Req(f"late{i}", [9 + i, 10], sp) for i in range(2)]
    launched = []
    launch = s._launch

    def watched(plan):
        out = launch(plan)
        launched.append((len(plan), any(p.pending is not None for p in plan)))
        return out

    monkeypatch.setattr(s, "_launch", watched)
    for req in first:
        s.add_request(req)
    for _ in range(3):
        s.step()
    assert any(pending for _, pending in launched)  # three requests overlap
    for req in late:
        s.add_request(req)
    while s.has_work():
        s.step()
    assert all(r.finished for r in first + late)
    assert not any(pending for n, pending in launched if n > 3)
    assert_pool_whole(engines["on"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunked_prefill_size": 16},  # prefill chunks planned while a chunk runs
        {"max_total_tokens": 240, "chunked_prefill_size": 32, "max_running_requests": 8},
        {"disable_radix_cache": True, "max_total_tokens": 200, "chunked_prefill_size": 32},
    ],
    ids=["chunks", "tight-pool", "no-cache"],
)
def test_same_tokens_under_chunking_eviction_and_retraction(engines, kwargs):
    params = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
    prompts = [p * 3 for p in PROMPTS] + PROMPTS
    reference = [o["output_ids"] for o in engines["off"].generate(prompts, params)]
    e = engine("on", **kwargs)
    try:
        assert [o["output_ids"] for o in e.generate(prompts, params)] == reference
        again = e.generate(prompts[:2], params)  # from the cache where there is one
        assert [o["output_ids"] for o in again] == reference[:2]
        assert e.get_stats()["overlapped_steps"] > 0
        assert_pool_whole(e)
    finally:
        e.shutdown()


def test_aborts_while_a_step_is_in_flight_leak_nothing(engines):
    e = engines["on"]
    sch = e.scheduler
    ids = e.tokenizer.encode(PROMPTS[0])
    reqs = [
        Req(f"a{i}", ids + [100 + i], SamplingParams(max_new_tokens=30, temperature=0.7))
        for i in range(6)
    ]
    for req in reqs:
        sch.add_request(req)
    for step in range(10):
        sch.step()
        if step == 4:  # decoding, with a step launched that samples for both
            assert sch._inflight is not None
            assert sch.abort("a0") and sch.abort("a3")
    while sch.has_work():
        sch.step()
    assert all(r.finished for r in reqs)
    assert reqs[0].finished_reason.type == "abort" and len(reqs[0].output_ids) < 30
    assert all(len(r.output_ids) == 30 for r in reqs if r.rid not in ("a0", "a3"))
    assert_pool_whole(e)


def test_a_failing_forward_fails_the_steps_that_depend_on_it(engines, monkeypatch):
    e = engines["on"]
    real = e.scheduler.runner.forward
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 4:  # mid-decode: the step after it takes its tokens as input
            raise RuntimeError("device lost")
        return real(batch)

    monkeypatch.setattr(e.scheduler.runner, "forward", flaky)
    params = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
    reqs = [Req(f"f{i}", [5, 6, 7 + i], SamplingParams.from_dict(params)) for i in range(3)]
    for req in reqs:
        e.scheduler.add_request(req)
    # one request arrives before each step: those of steps 1-4 are in the failed 4th forward,
    # the later ones are not, though step 5 is launched before step 4 lands
    late = [Req(f"g{i}", [9, 9, 9, 10 + i], SamplingParams.from_dict(params)) for i in range(8)]
    steps = 0
    while e.scheduler.has_work():
        if steps < len(late):
            e.scheduler.add_request(late[steps])
        e.scheduler.step()
        steps += 1
    assert all(r.finished_reason.status == 500 for r in reqs + late[:4])
    assert [r.finished_reason.type for r in late[4:]] == ["length"] * 4
    monkeypatch.setattr(e.scheduler.runner, "forward", real)
    assert_pool_whole(e)
    assert len(e.generate(PROMPTS[0], params)["output_ids"]) == 12


def test_a_sampler_failing_on_a_finished_requests_row_changes_nothing(engines, monkeypatch):
    from runtime.scheduler import scheduler

    params = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}
    ref = engines["off"].generate(PROMPTS[1], params)["output_ids"]
    calls = {"n": 0}

    def flaky(stage, rid):  # only a 4th sampling of the request fails: the row after its stop
        if stage == "sampling" and rid == "victim":
            calls["n"] += 1
            if calls["n"] >= 4:
                raise RuntimeError("bad row")

    monkeypatch.setattr(scheduler, "inject", flaky)
    out = engines["on"].generate(PROMPTS[1], {**params, "stop_token_ids": [ref[2]]}, rid="victim")
    assert out["output_ids"] == ref[:3]
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert_pool_whole(engines["on"])


def test_flush_right_after_the_last_abort(engines):
    sch = engines["on"].scheduler
    sch.add_request(Req("x", [5, 6, 7, 8], SamplingParams(max_new_tokens=30, temperature=0)))
    for _ in range(5):
        sch.step()
    assert sch.abort("x")
    assert sch.flush_cache()  # the step still holding its row lands first
    assert_pool_whole(engines["on"])


def test_a_failing_sampler_ends_its_request_alone(engines, monkeypatch):
    params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    clean = [o["output_ids"] for o in engines["on"].generate(PROMPTS, params)]
    monkeypatch.setattr(faults, "_ACTIVE", frozenset({"sampling"}))
    e = engines["on"]
    sp = SamplingParams.from_dict(params)
    ids = [e.tokenizer.encode(p) for p in PROMPTS]
    reqs = [Req(f"s{i}", x, sp) for i, x in enumerate(ids)]
    reqs[1] = Req(f"{faults.RID_PREFIX}s1", ids[1], sp)
    for req in reqs:
        e.scheduler.add_request(req)
    while e.scheduler.has_work():
        e.scheduler.step()
    assert reqs[1].finished_reason.status == 500
    assert [r.output_ids for i, r in enumerate(reqs) if i != 1] == clean[:1] + clean[2:]
    assert_pool_whole(e)


def test_a_server_with_overlap_survives_streams_cut_mid_step():
    import asyncio
    import time

    import httpx

    from tests.runtime.server_helpers import ServerProcess

    server = ServerProcess("--overlap-schedule", "on", "--max-total-tokens", "4096")
    url = server.url

    async def stream(c, i: int, cut: int | None):
        body = {
            "text": f"{PROMPTS[i % len(PROMPTS)]} ({i})",
            "sampling_params": {"max_new_tokens": 48, "temperature": 0.7, "ignore_eos": True},
            "stream": True,
        }
        chunks, last = 0, None
        async with c.stream("POST", f"{url}/generate", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunks, last = chunks + 1, json.loads(line[5:])
                if cut is not None and chunks >= cut:
                    return None  # leaves mid-stream: the server aborts the request
        return last["meta_info"]["completion_tokens"]

    async def constrained(c):
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Give a name and an age as JSON."}],
            "max_tokens": 60,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": SCHEMA},
            },
        }
        r = await c.post(f"{url}/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]

    async def main():
        async with httpx.AsyncClient(timeout=120) as c:
            streams = [stream(c, i, cut=(i % 3) + 1 if i % 2 else None) for i in range(12)]
            return await asyncio.gather(*streams, constrained(c), constrained(c))

    try:
        *tokens, first, second = asyncio.run(main())
        assert tokens[::2] == [48] * 6  # the uncut streams got every token
        for choice in (first, second):
            if choice["finish_reason"] == "stop":
                jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)
        deadline = time.time() + 30
        while time.time() < deadline:
            stats = httpx.get(f"{url}/get_server_info", timeout=10).json()["stats"]
            if stats["running"] == stats["waiting"] == 0:
                break
            time.sleep(0.3)
        assert stats["running"] == stats["waiting"] == 0, stats
        assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"], stats
        assert stats["overlapped_steps"] > 0
        assert httpx.post(f"{url}/flush_cache", timeout=10).status_code == 200
    finally:
        server.stop()
