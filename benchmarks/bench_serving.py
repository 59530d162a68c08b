"""Streaming load test of the HTTP server, and the same requests through the offline Engine.

At concurrency 1, 8, 32 and 64 it streams /generate requests (prompts of 64-256 tokens,
64 output tokens) and reports time to first token, p50/p95 inter-token latency, output tok/s
and successes; then runs the concurrency-32 requests through the offline Engine. Ends with one
JSON line. Starts its own server unless --url is given.

    python benchmarks/bench_serving.py [--url http://127.0.0.1:30000] [--output-len 64]
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx  # noqa: E402

LEVELS = (1, 8, 32, 64)


def make_requests(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(17, 49152) for _ in range(rng.randint(64, 256))] for _ in range(n)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def stream_one(client: httpx.AsyncClient, url: str, ids: list[int], out_len: int) -> dict:
    body = {
        "input_ids": ids,
        "stream": True,
        "sampling_params": {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True},
    }
    start = time.perf_counter()
    ttft, last, tokens, gaps = None, start, 0, []
    try:
        async with client.stream("POST", f"{url}/generate", json=body) as r:
            if r.status_code != 200:
                return {"ok": False}
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.perf_counter()
                count = json.loads(line[6:])["meta_info"]["completion_tokens"]
                if count > tokens:
                    if ttft is None:
                        ttft = now - start
                    else:
                        gaps.extend([(now - last) / (count - tokens)] * (count - tokens))
                    tokens, last = count, now
    except httpx.HTTPError:
        return {"ok": False}
    return {"ok": tokens == out_len, "ttft": ttft, "gaps": gaps, "tokens": tokens}


async def run_level(url: str, requests: list[list[int]], concurrency: int, out_len: int) -> dict:
    sem = asyncio.Semaphore(concurrency)

    async def limited(client, ids):
        async with sem:
            return await stream_one(client, url, ids, out_len)

    async with httpx.AsyncClient(
        timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)
    ) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(limited(client, ids) for ids in requests))
        elapsed = time.perf_counter() - start
    ok = [r for r in results if r["ok"]]
    gaps = [g for r in ok for g in r["gaps"]]
    return {
        "concurrency": concurrency,
        "requests": len(requests),
        "succeeded": len(ok),
        "failed": len(results) - len(ok),
        "output_tok_s": round(sum(r["tokens"] for r in ok) / elapsed, 2),
        "ttft_mean_s": round(statistics.mean(r["ttft"] for r in ok), 3) if ok else None,
        "itl_p50_ms": round(1000 * percentile(gaps, 0.5), 1),
        "itl_p95_ms": round(1000 * percentile(gaps, 0.95), 1),
    }


def run_engine(requests: list[list[int]], out_len: int, model_path: str) -> float:
    from runtime import Engine

    engine = Engine(model_path=model_path, log_level="warning")
    params = {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True}
    engine.generate(input_ids=requests[:2], sampling_params=params)  # warm-up
    engine.scheduler.flush_cache()
    start = time.perf_counter()
    engine.generate(input_ids=requests, sampling_params=params)
    elapsed = time.perf_counter() - start
    engine.shutdown()
    return len(requests) * out_len / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None, help="a running server (default: start one)")
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        from tests.runtime.server_helpers import ServerProcess

        server = ServerProcess("--model-path", args.model_path)
        url = server.url
    try:
        rows = []
        for level in LEVELS:
            httpx.post(f"{url}/flush_cache")
            requests = make_requests(max(4, 2 * level) if level < 32 else level, seed=level)
            rows.append(asyncio.run(run_level(url, requests, level, args.output_len)))
            print(rows[-1], flush=True)
    finally:
        if server is not None:
            server.stop()
    engine_tok_s = run_engine(make_requests(32, seed=32), args.output_len, args.model_path)
    c32 = next(r for r in rows if r["concurrency"] == 32)
    ratio = round(c32["output_tok_s"] / engine_tok_s, 3)
    print(
        f"{'conc':>5} {'ok':>4} {'fail':>4} {'tok/s':>8} {'ttft s':>7} {'itl p50 ms':>10} {'itl p95 ms':>10}"
    )
    for r in rows:
        print(
            f"{r['concurrency']:5d} {r['succeeded']:4d} {r['failed']:4d} {r['output_tok_s']:8.1f} "
            f"{r['ttft_mean_s']:7.3f} {r['itl_p50_ms']:10.1f} {r['itl_p95_ms']:10.1f}"
        )
    print(
        f"offline Engine, same 32 requests: {engine_tok_s:.1f} tok/s; HTTP at c=32 keeps {ratio:.0%}"
    )
    print(
        json.dumps(
            {
                "bench": "serving",
                "levels": rows,
                "engine_tok_s": round(engine_tok_s, 2),
                "http_c32_over_engine": ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
