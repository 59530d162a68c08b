"""--tp-size 2 end to end on a tiny random model: the server answers as one rank does, streams,
aborts, flushes, reports its ranks; two nodes (--nnodes 2) on this machine serve together; a rank that dies
fails its requests and stops the server with a line naming it; bad flags exit 2 at once."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from runtime.engine import Engine
from tests.runtime.conftest import make_tiny_model
from tests.runtime.server_helpers import ServerProcess, free_port

GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
PROMPTS = ["The capital of France is", "def add(a, b):", "Three colours: red,"]
# float32 as the one-rank reference (auto is bf16 on CPUs with native bf16)
COMMON = ("--cpu-threads", "1", "--max-total-tokens", "4096", "--log-interval", "0")
COMMON += ("--dtype", "float32")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, smollm2_folder) -> str:
    folder = str(tmp_path_factory.mktemp("tp-server"))
    return make_tiny_model(folder, smollm2_folder, "llama", num_key_value_heads=1)


@pytest.fixture(scope="module")
def expected(tiny_folder) -> list[str]:
    engine = Engine(model_path=tiny_folder, dtype="float32", cpu_threads=1, log_level="warning")
    try:
        return [o["text"] for o in engine.generate(PROMPTS, GREEDY)]
    finally:
        engine.shutdown()


def generate(url: str, prompt: str, **extra) -> dict:
    r = httpx.post(
        f"{url}/generate", json={"text": prompt, "sampling_params": GREEDY, **extra}, timeout=120
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_tp2_server_answers_as_one_rank_and_dies_with_a_rank(tiny_folder, expected):
    server = ServerProcess("--model-path", tiny_folder, "--tp-size", "2", *COMMON)
    last = None
    try:
        assert [generate(server.url, p)["text"] for p in PROMPTS] == expected
        body = {"text": PROMPTS[0], "sampling_params": GREEDY, "stream": True}
        with httpx.stream("POST", f"{server.url}/generate", json=body, timeout=60) as r:
            events = [line for line in r.iter_lines() if line.startswith("data:")]
        assert events[-1] == "data: [DONE]" and expected[0] in events[-2]
        body = {**body, "rid": "tp-abort-me", "sampling_params": {"max_new_tokens": 3000}}
        with httpx.stream("POST", f"{server.url}/generate", json=body, timeout=60) as r:
            for n, line in enumerate(r.iter_lines()):
                if n == 3:
                    httpx.post(f"{server.url}/abort_request", json={"rid": "tp-abort-me"})
                last = line if line.startswith("data: {") else last
        assert '"abort"' in last
        assert httpx.post(f"{server.url}/flush_cache", timeout=30).status_code == 200
        again = generate(server.url, PROMPTS[1], return_logprob=True)
        assert again["text"] == expected[1] and again["meta_info"]["cached_tokens"] == 0
        ranks = httpx.get(f"{server.url}/get_server_info", timeout=10).json()
        ranks = ranks["tensor_parallel_ranks"]
        assert [r["rank"] for r in ranks] == [1]
        # a rank killed while a request runs: the request fails, the server stops, and says why
        long = {"text": "Count:", "stream": True, "sampling_params": {"max_new_tokens": 3000}}
        with httpx.stream("POST", f"{server.url}/generate", json=long, timeout=60) as r:
            lines = r.iter_lines()
            next(lines)
            os.kill(ranks[0]["pid"], signal.SIGKILL)
            rest = list(lines)
        assert any('"error"' in line or "abort" in line for line in rest), rest
        deadline = time.time() + 30
        while server.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert server.proc.returncode == 1
        assert "radixgen-tp-rank-1 process (tensor-parallel rank 1 of 2) died" in server.output()
    finally:
        server.stop()


def test_two_nodes_serve_together_and_the_second_stops_with_the_first(tiny_folder, expected):
    addr = f"127.0.0.1:{free_port()}"
    flags = ("--model-path", tiny_folder, "--tp-size", "2", "--nnodes", "2", *COMMON)
    flags += ("--dist-init-addr", addr)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    node1 = subprocess.Popen(
        [sys.executable, "-m", "runtime.launch_server", *flags, "--node-rank", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        node0 = ServerProcess(*flags, "--node-rank", "0")
        try:
            assert [generate(node0.url, p)["text"] for p in PROMPTS] == expected
            assert node1.poll() is None
        finally:
            node0.stop()
        assert node1.wait(timeout=60) is not None
        log = node1.stdout.read()
        assert "node 1 of 2: tensor-parallel ranks 1 running" in log
        assert "the tensor-parallel group is gone" in log
    finally:
        if node1.poll() is None:
            node1.kill()


@pytest.mark.parametrize(
    "flags,words",
    [
        (("--tp-size", "2", "--quantization", "int4"), "--quantization int4 does not run"),
        (("--tp-size", "2", "--nnodes", "2"), "--dist-init-addr"),
        (("--tp-size", "3", "--nnodes", "2"), "--nnodes 2 must divide"),
        (("--tp-size", "0"), "--tp-size must lie in"),
        (("--tp-size", "4"), "cannot be split"),  # SmolLM2: 3 KV heads over 4 ranks
        (("--nnodes", "2", "--dist-init-addr", "nowhere", "--tp-size", "2"), "host:port"),
        (("--nnodes", "2", "--dist-init-addr", "h:\u00b2", "--tp-size", "2"), "host:port"),
    ],
)
def test_bad_parallel_flags_exit_2_naming_the_flag(flags, words):
    out = subprocess.run(
        [sys.executable, "-m", "runtime.launch_server", "--model-path", "smollm2", *flags],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert words in out.stderr, out.stderr
