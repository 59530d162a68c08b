"""A failure inside the scheduler for one request ends that request alone (an error with status
500) while the rest of the batch finishes as if nothing happened, and no KV slot leaks."""

import pytest

from runtime import Engine, faults
from runtime.sampling.params import SamplingParams
from runtime.scheduler.req import Req

GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
PROMPTS = {"a": [5, 6, 7, 8, 9], "b": [10, 11, 12], "c": [13, 14, 15, 16]}


@pytest.fixture(scope="module")
def engine(tmp_path_factory, smollm2_folder):
    from tests.runtime.conftest import make_tiny_model

    folder = make_tiny_model(str(tmp_path_factory.mktemp("tiny")), smollm2_folder, "llama")
    engine = Engine(model_path=folder, dtype="float32", log_level="error", max_total_tokens=512)
    yield engine
    engine.shutdown()


def run(engine, reqs: list[Req]) -> None:
    for req in reqs:
        engine.scheduler.add_request(req)
    for _ in range(200):
        if all(r.finished for r in reqs):
            break
        engine.scheduler.step()
    assert all(r.finished for r in reqs)


def batch(victim: str | None = None, **params) -> list[Req]:
    sp = SamplingParams.from_dict(GREEDY | params)
    return [
        Req(f"{faults.RID_PREFIX}{name}" if name == victim else name, ids, sp)
        for name, ids in PROMPTS.items()
    ]


def assert_pool_whole(engine) -> None:
    stats = engine.get_stats()
    assert stats["running"] == stats["waiting"] == 0
    assert stats["kv_free"] + stats["tree_tokens"] == stats["kv_pool_size"]


@pytest.fixture(scope="module")
def clean_outputs(engine):
    reqs = batch()
    run(engine, reqs)
    return {r.rid: r.output_ids for r in reqs}


@pytest.mark.parametrize("stage", ["sampling", "grammar"])
def test_a_failing_request_ends_alone(engine, clean_outputs, monkeypatch, stage):
    monkeypatch.setattr(faults, "_ACTIVE", frozenset({stage}))
    params = {"regex": "[a-z ]+"} if stage == "grammar" else {}
    reqs = batch(victim="b", **params)
    run(engine, reqs)
    victim = reqs[1]
    assert victim.finished_reason.status == 500
    assert "internal error" in victim.finished_reason.message
    for req in (reqs[0], reqs[2]):
        assert req.finished_reason.type == "length"
        if stage == "sampling":  # unconstrained: the same tokens as a clean batch
            assert req.output_ids == clean_outputs[req.rid]
    assert_pool_whole(engine)


def test_admission_failure_raises_and_leaves_the_scheduler_usable(engine, monkeypatch):
    monkeypatch.setattr(faults, "_ACTIVE", frozenset({"admission"}))
    with pytest.raises(faults.InjectedFault):
        engine.scheduler.add_request(Req("fault-x", [1, 2, 3], SamplingParams()))
    monkeypatch.setattr(faults, "_ACTIVE", frozenset())
    reqs = batch()
    run(engine, reqs)
    assert all(r.finished_reason.type == "length" for r in reqs)
    assert_pool_whole(engine)


def test_a_failing_forward_fails_its_step_and_frees_its_slots(engine, monkeypatch):
    real = engine.scheduler.runner.forward
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 3:  # mid-decode
            raise RuntimeError("device lost")
        return real(batch)

    monkeypatch.setattr(engine.scheduler.runner, "forward", flaky)
    reqs = batch()
    run(engine, reqs)
    assert all(r.finished_reason.status == 500 for r in reqs)
    monkeypatch.setattr(engine.scheduler.runner, "forward", real)
    assert_pool_whole(engine)
    again = batch()
    run(engine, again)
    assert all(r.finished_reason.type == "length" for r in again)


def test_output_longer_than_the_context_is_clamped(engine):
    context = engine.scheduler.context_length
    req = Req("long", [1, 2, 3], SamplingParams.from_dict(GREEDY | {"max_new_tokens": 10**9}))
    engine.scheduler.add_request(req)
    assert req.sampling_params.max_new_tokens == context - 3
    engine.scheduler.abort("long")
    assert_pool_whole(engine)
