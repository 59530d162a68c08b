"""Reliability of the HTTP server under abuse.

1. Abort storm: 1,000 streams cut at random points (after k events, or after a random time,
   from before the first byte to mid-generation); then, once all are gone, the cache is
   flushed and the KV pool must be whole (every slot free): the rest are leaked slots.
2. Overload: 500 non-streaming requests at once; a lost request is one that does not come
   back as a 200 with all its tokens.
3. Crash list: every hostile request of tests/runtime/server/test_reliability.py plus
   100 MB bodies; counts 5xx answers and whether the server survived each case (a server that
   died is started again for the next case).
4. Compile stall: the latency of a plain 2-token /generate on an idle server, and while seven
   large JSON-schema enums compile.

Targets: 0 leaked slots, 0 lost requests, 0 5xx, a compile-stall ratio under 2. Starts its
own server (only 127.0.0.1) and ends with one JSON line.

    python benchmarks/bench_reliability.py [--streams 1000] [--overload 500] [--enum-size 100000]
        [--sections storm,overload,crashes,stall]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx  # noqa: E402

from tests.runtime.server.test_reliability import (  # noqa: E402
    ACCEPTED,
    HOSTILE_400,
    big_body,
    enum_schema,
)
from tests.runtime.server_helpers import SharedServer, post_raw  # noqa: E402

SECTION_LIMIT_S = 600  # no section runs longer than this


class Bench:
    """The server under test (started again when a case took it down) and the 5xx count."""

    def __init__(self, model_path: str):
        self.server = SharedServer("--model-path", model_path)
        self.http_5xx = 0

    @property
    def url(self) -> str:
        return self.server.url

    def count(self, status: int | None) -> None:
        if status is not None and status >= 500:
            self.http_5xx += 1

    def wait_idle(self, timeout: float = 120) -> dict:
        deadline = time.time() + timeout
        while True:
            s = self.server.stats()
            if (s.get("running") == 0 and s.get("waiting") == 0) or time.time() > deadline:
                return s
            time.sleep(0.5)


def random_prompt(rng: random.Random, low: int, high: int) -> list[int]:
    return [rng.randrange(17, 49152) for _ in range(rng.randint(low, high))]


# ---- 1. abort storm ------------------------------------------------------------------------


async def cut_stream(
    client: httpx.AsyncClient, url: str, rng: random.Random, bench: Bench, deadline: float
) -> str:
    """One stream, cut after k events or after t seconds (at the latest at `deadline`);
    'cut', 'finished' or 'error'."""
    body = {
        "input_ids": random_prompt(rng, 4, 32),
        "stream": True,
        "sampling_params": {"max_new_tokens": 48, "ignore_eos": True, "temperature": 0.8},
    }
    by_events = rng.random() < 0.5
    events_left, seconds = rng.randint(0, 24), rng.uniform(0.0, 3.0)

    async def consume() -> str:
        nonlocal events_left
        async with client.stream("POST", f"{url}/generate", json=body) as r:
            bench.count(r.status_code)
            if r.status_code != 200:
                return "error"
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    return "finished"
                if by_events and line.startswith("data: "):
                    events_left -= 1
                    if events_left < 0:
                        return "cut"  # leaving the block closes the connection
        return "error"  # the stream ended without [DONE]

    limit = max(deadline - time.time(), 0.0)
    try:
        return await asyncio.wait_for(consume(), limit if by_events else min(seconds, limit))
    except asyncio.TimeoutError:
        return "cut"
    except httpx.HTTPError:
        return "error"


async def run_storm(bench: Bench, n: int, concurrency: int, seed: int) -> dict:
    rng, sem = random.Random(seed), asyncio.Semaphore(concurrency)
    deadline = time.time() + SECTION_LIMIT_S

    async def limited(client):
        async with sem:
            if time.time() > deadline:
                return "skipped"
            return await cut_stream(client, bench.url, rng, bench, deadline)

    limits = httpx.Limits(max_connections=concurrency + 8)
    async with httpx.AsyncClient(timeout=SECTION_LIMIT_S, limits=limits) as client:
        outcomes = await asyncio.gather(*(limited(client) for _ in range(n)))
    return {k: outcomes.count(k) for k in ("cut", "finished", "error", "skipped")}


def abort_storm(bench: Bench, n: int, concurrency: int) -> dict:
    start = time.perf_counter()
    outcomes = asyncio.run(run_storm(bench, n, concurrency, seed=0))
    s = bench.wait_idle()
    flushed = False
    for _ in range(20):  # the last aborts may still be on their way
        r = httpx.post(f"{bench.url}/flush_cache", timeout=30)
        if r.status_code == 200:
            flushed = True
            break
        time.sleep(0.5)
    s = bench.server.stats()
    leaked = s.get("kv_pool_size", 0) - s.get("kv_free", 0)
    return {
        "streams": n,
        **outcomes,
        "flushed": flushed,
        "leaked_slots": leaked,
        "protected": s.get("protected"),
        "elapsed_s": round(time.perf_counter() - start, 1),
    }


# ---- 2. overload -----------------------------------------------------------------------------


async def run_overload(bench: Bench, n: int, out_len: int) -> tuple[list[bool], list[float]]:
    rng = random.Random(1)
    bodies = [
        {
            "input_ids": random_prompt(rng, 8, 32),
            "sampling_params": {"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0},
        }
        for _ in range(n)
    ]

    async def one(client, body) -> tuple[bool, float]:
        start = time.perf_counter()
        try:
            r = await client.post(f"{bench.url}/generate", json=body)
        except httpx.HTTPError:
            return False, time.perf_counter() - start
        bench.count(r.status_code)
        ok = r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == out_len
        return ok, time.perf_counter() - start

    limits = httpx.Limits(max_connections=n + 8)
    async with httpx.AsyncClient(timeout=SECTION_LIMIT_S, limits=limits) as client:
        results = await asyncio.gather(*(one(client, b) for b in bodies))
    return [ok for ok, _ in results], [t for _, t in results]


def overload(bench: Bench, n: int, out_len: int = 8) -> dict:
    start = time.perf_counter()
    oks, latencies = asyncio.run(run_overload(bench, n, out_len))
    latencies.sort()
    return {
        "requests": n,
        "succeeded": sum(oks),
        "lost": n - sum(oks),
        "latency_p50_s": round(latencies[len(latencies) // 2], 2),
        "latency_max_s": round(latencies[-1], 2),
        "elapsed_s": round(time.perf_counter() - start, 1),
    }


# ---- 3. crash list ---------------------------------------------------------------------------


def crash_cases() -> list[tuple[str, str, object]]:
    """(name, path, JSON-able body or a list of byte pieces sent raw)."""
    cases = [(f"{path} {word or 'shape'}", path, body) for path, body, word in HOSTILE_400]
    cases += [(f"{path} accepted", path, body) for path, body in ACCEPTED]
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    cases += [
        ("chat temperature 1e-40", "/v1/chat/completions", {**chat, "temperature": 1e-40}),
        ("5 MB prompt", "/generate", {"text": "word " * 1_000_000}),
        ("100 MB body", "/generate", big_body(100 << 20)),
        (
            "100 MB stop string",
            "/generate",
            [b'{"text": "hi", "sampling_params": {"stop": "', *big_body(100 << 20)[1:-1], b'"}}'],
        ),
    ]
    return cases


def crash_list(bench: Bench) -> dict:
    rows, deadline = [], time.time() + SECTION_LIMIT_S
    for name, path, body in crash_cases():
        if time.time() > deadline:
            break
        start = time.perf_counter()
        if isinstance(body, list):
            status = post_raw(bench.server.process.port, path, body)
        else:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            try:
                status = httpx.post(
                    f"{bench.url}{path}",
                    content=content,
                    headers={"Content-Type": "application/json"},
                    timeout=120,
                ).status_code
            except httpx.HTTPError:
                status = None
        bench.count(status)
        survived = bench.server.answers()
        seconds = time.perf_counter() - start
        rows.append({"case": name, "status": status, "survived": survived, "seconds": seconds})
        print(
            f"  {name[:60]:60s} {status!s:>5} {'survived' if survived else 'DIED':8s} "
            f"{seconds:7.2f} s",
            flush=True,
        )
        if not survived:
            bench.server.suspect = True
            bench.server.up()
    return {"cases": rows, "survived": sum(r["survived"] for r in rows), "total": len(rows)}


# ---- 4. compile stall ------------------------------------------------------------------------


def plain_latency(bench: Bench) -> float:
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 2}}
    start = time.perf_counter()
    r = httpx.post(f"{bench.url}/generate", json=body, timeout=SECTION_LIMIT_S)
    bench.count(r.status_code)
    return time.perf_counter() - start


def compile_stall(bench: Bench, enum_size: int, compiles: int = 7) -> dict:
    idle = statistics.median(plain_latency(bench) for _ in range(5))

    def compile_request(i: int) -> int | None:
        schema = enum_schema(enum_size, salt=f"c{i}-")  # distinct: compiled grammars are cached
        params = {"json_schema": schema, "max_new_tokens": 8}
        body = json.dumps({"text": "Pick one:", "sampling_params": params}).encode()
        try:
            r = httpx.post(
                f"{bench.url}/generate",
                content=body,
                headers={"Content-Type": "application/json"},
                timeout=180,
            )
        except httpx.HTTPError:
            return None
        bench.count(r.status_code)
        return r.status_code

    with ThreadPoolExecutor(compiles) as pool:
        futures = [pool.submit(compile_request, i) for i in range(compiles)]
        time.sleep(1.0)  # the compiles have started
        during = statistics.median(plain_latency(bench) for _ in range(3))
        statuses = [f.result() for f in futures]
    return {
        "enum_size": enum_size,
        "compiles": compiles,
        "compile_statuses": statuses,
        "plain_latency_idle_s": round(idle, 3),
        "plain_latency_during_compiles_s": round(during, 3),
        "compile_stall_ratio": round(during / idle, 2),
    }


SECTIONS = ("storm", "overload", "crashes", "stall")


def summary(bench: Bench, results: dict) -> dict:
    """The headline figures of the sections that ran (None for the others)."""
    storm, load = results.get("storm"), results.get("overload")
    crashes, stall = results.get("crashes"), results.get("stall") or {}
    lost = None
    if storm or load:
        lost = (load or {}).get("lost", 0) + (storm or {}).get("error", 0)
    return {
        "bench": "reliability",
        "leaked_slots": storm["leaked_slots"] if storm else None,
        "lost_requests": lost,
        "http_5xx": bench.http_5xx,
        "plain_latency_idle_s": stall.get("plain_latency_idle_s"),
        "plain_latency_during_compiles_s": stall.get("plain_latency_during_compiles_s"),
        "compile_stall_ratio": stall.get("compile_stall_ratio"),
        "crash_cases_survived": f"{crashes['survived']}/{crashes['total']}" if crashes else None,
        "abort_storm": storm,
        "overload": load,
        "crash_cases_died": [r["case"] for r in crashes["cases"] if not r["survived"]]
        if crashes
        else None,
        "crash_cases_5xx": [r["case"] for r in crashes["cases"] if (r["status"] or 0) >= 500]
        if crashes
        else None,
        "compile_statuses": stall.get("compile_statuses"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--storm-concurrency", type=int, default=64)
    parser.add_argument("--overload", type=int, default=500)
    parser.add_argument("--enum-size", type=int, default=100_000)
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"a subset of {','.join(SECTIONS)}"
    )
    args = parser.parse_args()
    sections = args.sections.split(",")
    if not set(sections) <= set(SECTIONS):
        parser.error(f"--sections: choose from {SECTIONS}")

    bench, results = Bench(args.model_path), {}
    bench.server.up()
    try:
        if "storm" in sections:
            results["storm"] = abort_storm(bench, args.streams, args.storm_concurrency)
            print("abort storm:", results["storm"], flush=True)
        if "overload" in sections:
            results["overload"] = overload(bench, args.overload)
            print("overload:", results["overload"], flush=True)
        if "crashes" in sections:
            crashes = results["crashes"] = crash_list(bench)
            print(f"crash list: {crashes['survived']}/{crashes['total']} survived", flush=True)
        if "stall" in sections:
            results["stall"] = compile_stall(bench, args.enum_size)
            print("compile stall:", results["stall"], flush=True)
    finally:
        bench.server.stop()
    print(json.dumps(summary(bench, results)))


if __name__ == "__main__":
    main()
