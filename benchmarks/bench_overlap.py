"""Overlap scheduling against steps run one by one (`--overlap-schedule on` / `off`), on the
default model with one kernel thread: the model's step is one native call that leaves the
other core free, which is how a GPU leaves the host free, so the host work of step N+1
(landing step N, planning, building the batch) can run while step N computes.

    python benchmarks/bench_overlap.py [--batches 1,16] [--tokens 64] [--rounds 3]

Prints per batch size the decode tokens/s of each schedule (best of the rounds, taken in
turn) and on's over off's; one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="the model's kernel threads")
    args = parser.parse_args()
    from runtime import Engine

    engines = {
        schedule: Engine(
            model_path=args.model,
            log_level="warning",
            cpu_threads=args.threads,
            overlap_schedule=schedule,
        )
        for schedule in ("off", "on")
    }
    figures = {"bench": "overlap", "model": args.model, "threads": args.threads}
    params = {"max_new_tokens": args.tokens, "temperature": 0, "ignore_eos": True}
    for b in [int(x) for x in args.batches.split(",")]:
        prompts = [f"Story {i}: once upon a time, in a village by the sea," for i in range(b)]
        for engine in engines.values():  # warm: the prompts' KV comes from the cache after
            engine.generate(prompts, {**params, "max_new_tokens": 2})
        rate = dict.fromkeys(engines, 0.0)
        for _ in range(args.rounds):
            for schedule, engine in engines.items():
                start = time.perf_counter()
                engine.generate(prompts, params)
                rate[schedule] = max(
                    rate[schedule], b * args.tokens / (time.perf_counter() - start)
                )
        figures[f"batch_{b}"] = {
            **{f"tok_s_{k}": round(v, 1) for k, v in rate.items()},
            "ratio": round(rate["on"] / rate["off"], 3),
        }
        print(b, figures[f"batch_{b}"], flush=True)
    for engine in engines.values():
        engine.shutdown()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
