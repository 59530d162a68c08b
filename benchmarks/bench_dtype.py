"""Which dtype the Engine should run in on this CPU: bf16 against fp32 on the same requests.

For each dtype (one Engine at a time, rounds alternating, best of --rounds): an 800-token
prefill, single-stream decode of 64 tokens, and 16 streams decoding 64 tokens each. Prints
the figures, what `--dtype auto` picks here and why, and ends with one JSON line.

    python benchmarks/bench_dtype.py [--rounds 2] [--cpu-threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from runtime import Engine  # noqa: E402
from runtime.model.runner import cpu_has_native_bf16, pick_dtype  # noqa: E402

PROMPT = list(range(1000, 1800))  # 800 ordinary SmolLM2 tokens
DECODE = {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(dtype: str, threads: int) -> dict:
    engine = Engine(model_path="smollm2", dtype=dtype, log_level="warning", cpu_threads=threads)
    try:
        warm_up = list(range(3000, 3050))  # shares no prefix with PROMPT
        engine.generate(input_ids=warm_up, sampling_params={"max_new_tokens": 2})
        prefill = seconds(
            lambda: engine.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 1})
        )
        single = seconds(lambda: engine.generate(input_ids=[5, 6, 7], sampling_params=DECODE))
        batch = [[5, 6, 7 + i] for i in range(16)]
        many = seconds(lambda: engine.generate(input_ids=batch, sampling_params=DECODE))
    finally:
        engine.shutdown()
    return {
        "prefill_tok_s": len(PROMPT) / prefill,
        "decode_b1_tok_s": 64 / single,
        "decode_b16_tok_s": 16 * 64 / many,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpu-threads", type=int, default=1)
    args = parser.parse_args()
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for dtype in ("bfloat16", "float32"):
            figures = measure(dtype, args.cpu_threads)
            kept = best.setdefault(dtype, figures)
            for key, value in figures.items():
                kept[key] = max(kept[key], value)
    for dtype, figures in best.items():
        print(
            f"{dtype:>9}: prefill {figures['prefill_tok_s']:7.1f} tok/s | decode batch 1 "
            f"{figures['decode_b1_tok_s']:6.1f} tok/s | batch 16 {figures['decode_b16_tok_s']:6.1f} tok/s"
        )
    ratios = {k: best["float32"][k] / best["bfloat16"][k] for k in best["float32"]}
    auto = str(pick_dtype("auto", "cpu")).removeprefix("torch.")
    print(f"fp32 / bf16: {', '.join(f'{k} {v:.2f}x' for k, v in ratios.items())}")
    print(f"--dtype auto picks {auto} here (native bf16: {cpu_has_native_bf16()})")
    print(
        json.dumps(
            {
                "bench": "dtype",
                "cpu_threads": args.cpu_threads,
                "native_bf16": cpu_has_native_bf16(),
                "auto": auto,
                "figures": best,
                "fp32_over_bf16": ratios,
            }
        )
    )


if __name__ == "__main__":
    main()
