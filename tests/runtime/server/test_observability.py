"""What an operator sees: a start-up summary, a throughput line while requests run, request
logs at debug level, and a real time-to-first-token for non-streaming requests; each process's
start-up heap frozen out of the cyclic collector."""

import re

import httpx
import pytest

from tests.runtime.server_helpers import ServerProcess


@pytest.fixture(scope="module")
def server():
    proc = ServerProcess(
        "--log-level", "debug", "--max-total-tokens", "4096", "--log-interval", "0.5"
    )
    yield proc
    proc.stop()


def test_logs_and_time_to_first_token(server):
    body = {
        "text": "Tell me a long story.",
        "rid": "story-1",
        "sampling_params": {"max_new_tokens": 120, "ignore_eos": True, "temperature": 0},
    }
    # a first request pays the processes' one-time warm-up (about a second here)
    warm_up = {"text": "Hi", "sampling_params": {"max_new_tokens": 1}}
    httpx.post(f"{server.url}/generate", json=warm_up, timeout=900).raise_for_status()
    out = httpx.post(f"{server.url}/generate", json=body, timeout=900).json()
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 120
    # the first token came long before the last: ttft is not the end-to-end latency
    assert 0 < meta["ttft"] < 0.5 * meta["e2e_latency"]
    log = server.output()
    assert re.search(
        r"on cpu \((bfloat16|float32)(; int[48] weights)?\), context \d+, KV pool 4096 tokens, radix cache",
        log,
    )
    assert "request story-1: 6 prompt tokens, max_new_tokens 120" in log
    for process in ("scheduler", "detokenizer", "server"):  # no full collection walks these
        frozen = re.search(rf"{process}: (\d+) start-up objects frozen", log)
        assert frozen and int(frozen.group(1)) > 10_000, process
    assert "request story-1 finished (length): 120 output tokens" in log
    line = re.search(
        r"running \d+, waiting \d+ \| prefill [\d.]+ tok/s, decode ([\d.]+) tok/s", log
    )
    assert line and float(line.group(1)) > 0
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    count = re.search(r"radixgen_time_to_first_token_seconds_count (\S+)", metrics)
    assert count and float(count.group(1)) >= 1
