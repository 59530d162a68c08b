"""--dp-size 2 end to end, on a tiny random model: a session's turns stay on one worker,
unrelated prompts spread, abort and flush reach the right workers, outputs equal one worker's
(the offline Engine's), and a dead worker fails its requests and stops the server."""

import os
import signal
import time

import httpx
import pytest

from tests.runtime.conftest import make_tiny_model
from tests.runtime.server_helpers import ServerProcess


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, smollm2_folder) -> str:
    folder = str(tmp_path_factory.mktemp("dp-tiny"))
    return make_tiny_model(folder, smollm2_folder, "llama", max_position_embeddings=4096)


@pytest.fixture(scope="module")
def server(tiny_folder):
    s = ServerProcess(
        "--model-path", tiny_folder, "--dp-size", "2", "--cpu-threads", "1",
        "--max-total-tokens", "8192", "--log-interval", "0", "--dtype", "float32",
    )  # fmt: skip
    yield s
    s.stop()


def info(server) -> dict:
    return httpx.get(f"{server.url}/get_server_info", timeout=10).json()


def workers(server) -> list[dict]:
    return info(server)["workers"]


def generate(server, body: dict) -> dict:
    r = httpx.post(f"{server.url}/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def wait_idle(server) -> list[dict]:
    deadline = time.time() + 30
    while time.time() < deadline:
        ws = workers(server)
        if all(w["running"] == w["waiting"] == w["requests_in_flight"] == 0 for w in ws):
            return ws
        time.sleep(0.2)
    raise AssertionError(f"workers still busy: {workers(server)}")


GREEDY = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}


def test_a_sessions_turns_go_to_the_same_worker(server):
    wait_idle(server)
    assert httpx.post(f"{server.url}/flush_cache", timeout=30).status_code == 200
    histories = {"a": "Session a asks about whales. " * 6, "b": "Session b wants tea, now. " * 6}
    on_worker, cached = {}, {"a": [], "b": []}
    for turn in range(4):
        for name in histories:
            histories[name] += f" Turn {turn}: tell me more, please."
            before = [w["prompt_tokens"] for w in workers(server)]
            out = generate(server, {"text": histories[name], "sampling_params": GREEDY})
            histories[name] += out["text"]
            cached[name].append(out["meta_info"]["cached_tokens"])
            after = [w["prompt_tokens"] for w in workers(server)]
            grown = [w for w in range(2) if after[w] > before[w]]
            assert len(grown) == 1, (before, after)
            assert on_worker.setdefault(name, grown[0]) == grown[0], f"session {name} moved"
    assert on_worker["a"] != on_worker["b"]  # the two sessions also spread
    for hits in cached.values():
        assert hits[0] == 0 and all(later > earlier for earlier, later in zip(hits, hits[1:]))


def test_unrelated_prompts_spread_across_workers(server):
    wait_idle(server)
    before = [w["prompt_tokens"] for w in workers(server)]
    prompts = [f"{i} unrelated prompt number {i * 7919} about topic {i}" for i in range(8)]
    outs = generate(server, {"text": prompts, "sampling_params": GREEDY})
    assert len(outs) == 8
    after = [w["prompt_tokens"] for w in wait_idle(server)]
    assert all(a > b for a, b in zip(after, before)), (before, after)
    metrics = httpx.get(f"{server.url}/metrics").text
    for w in ("0", "1"):
        assert f'radixgen_worker_running_requests{{worker="{w}"}}' in metrics
        assert f'radixgen_worker_requests_in_flight{{worker="{w}"}}' in metrics
    total = info(server)["stats"]
    assert total["prompt_tokens"] == sum(w["prompt_tokens"] for w in workers(server))


def test_abort_reaches_the_worker_running_the_request(server):
    wait_idle(server)
    before = [w["aborted_requests"] for w in workers(server)]
    body = {
        "text": "A long story about the sea.",
        "rid": "dp-abort-me",
        "stream": True,
        "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True},
    }
    last = None
    with httpx.stream("POST", f"{server.url}/generate", json=body, timeout=60) as r:
        for n, line in enumerate(r.iter_lines()):
            if n == 3:
                running = [w["running"] for w in workers(server)]
                assert sorted(running) == [0, 1]
                httpx.post(f"{server.url}/abort_request", json={"rid": "dp-abort-me"})
            if line.startswith("data: {"):
                last = line
    assert '"abort"' in last
    after = [w["aborted_requests"] for w in wait_idle(server)]
    ran_on = running.index(1)
    assert after[ran_on] == before[ran_on] + 1 and after[1 - ran_on] == before[1 - ran_on]


def test_flush_cache_reaches_every_worker(server):
    prompts = ["Flush me, first worker, " * 5, "Something else for the other one. " * 5]
    generate(server, {"text": prompts, "sampling_params": GREEDY})
    assert all(w["tree_tokens"] > 0 for w in wait_idle(server))
    assert httpx.post(f"{server.url}/flush_cache", timeout=30).status_code == 200
    assert all(w["tree_tokens"] == 0 for w in workers(server))
    again = generate(server, {"text": prompts[0], "sampling_params": GREEDY})
    assert again["meta_info"]["cached_tokens"] == 0


def test_outputs_equal_one_workers_with_streaming_and_constraints(server, tiny_folder):
    from runtime import Engine

    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(6)]
    regex = {**GREEDY, "regex": "(yes|no)[0-9]{3}"}
    # float32 on both sides: bf16 products (auto on CPUs with native bf16) vary with the batch
    engine = Engine(model_path=tiny_folder, cpu_threads=1, max_total_tokens=8192, dtype="float32")
    try:
        expected = engine.generate(prompts, GREEDY)
        expected_regex = engine.generate(prompts[0], regex)
    finally:
        engine.shutdown()
    got = generate(server, {"text": prompts, "sampling_params": GREEDY})
    assert [g["output_ids"] for g in got] == [e["output_ids"] for e in expected]
    assert (
        generate(server, {"text": prompts[0], "sampling_params": regex})["text"]
        == (expected_regex["text"])
    )
    with httpx.stream(
        "POST",
        f"{server.url}/generate",
        json={"text": prompts[1], "stream": True, "sampling_params": GREEDY},
        timeout=60,
    ) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and expected[1]["text"] in events[-2]


def test_a_dead_worker_fails_its_requests_and_stops_the_server(server):
    """Last in this module: it takes the shared server down."""
    wait_idle(server)
    pids = [w["pid"] for w in workers(server)]
    body = {
        "text": "Count to a million.",
        "stream": True,
        "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True},
    }
    with httpx.stream("POST", f"{server.url}/generate", json=body, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        victim = [w["running"] for w in workers(server)].index(1)
        os.kill(pids[victim], signal.SIGKILL)
        rest = list(lines)
    assert any(f"worker {victim} died" in line for line in rest), rest
    deadline = time.time() + 30
    while server.proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert server.proc.returncode == 1
    assert f"radixgen-scheduler-{victim} process (data-parallel worker {victim} of 2) died" in (
        server.output()
    )
