"""Offline throughput: radixgen's Engine against transformers' generate on the same requests.

64 greedy requests with prompt lengths 32-512 and output lengths 16-256 (fixed by ignore_eos),
run by the Engine (continuous batching) and by transformers (static batches, left padding),
both in the same dtype; plus single-stream decode speed for both (best of three, alternating).
Ends with one JSON line.

    python benchmarks/bench_offline.py [--num-requests 64] [--hf-batch-size 16] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from runtime import Engine  # noqa: E402

FIRST_ORDINARY_TOKEN = 17  # ids below are special tokens in SmolLM2's vocabulary


def make_requests(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(FIRST_ORDINARY_TOKEN, vocab) for _ in range(rng.randint(32, 512))],
            rng.randint(16, 256),
        )
        for _ in range(n)
    ]


def run_engine(engine: Engine, requests) -> float:
    params = [{"max_new_tokens": m, "temperature": 0, "ignore_eos": True} for _, m in requests]
    start = time.perf_counter()
    outs = engine.generate(input_ids=[p for p, _ in requests], sampling_params=params)
    elapsed = time.perf_counter() - start
    assert [len(o["output_ids"]) for o in outs] == [m for _, m in requests]
    return elapsed


@torch.inference_mode()
def run_hf(model, requests, batch_size: int, pad_id: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(requests), batch_size):
        chunk = requests[i : i + batch_size]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p, _ in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk])
        longest = max(m for _, m in chunk)
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=longest,
            min_new_tokens=longest,
            do_sample=False,
            pad_token_id=pad_id,
        )
    return time.perf_counter() - start


def single_stream_engine(engine: Engine, prompt: list[int], tokens: int) -> float:
    sp = {"temperature": 0, "ignore_eos": True}
    start = time.perf_counter()
    engine.generate(input_ids=prompt, sampling_params={**sp, "max_new_tokens": 1})
    first = time.perf_counter() - start
    start = time.perf_counter()
    engine.generate(input_ids=prompt, sampling_params={**sp, "max_new_tokens": tokens + 1})
    return tokens / (time.perf_counter() - start - first)


@torch.inference_mode()
def single_stream_hf(model, prompt: list[int], tokens: int, pad_id: int) -> float:
    ids = torch.tensor([prompt])

    def timed(n):
        start = time.perf_counter()
        model.generate(
            input_ids=ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=pad_id
        )
        return time.perf_counter() - start

    first = timed(1)
    return tokens / (timed(tokens + 1) - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--single-stream-tokens", type=int, default=128)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    engine = Engine(model_path=args.model_path, dtype=args.dtype, log_level="warning")
    folder = engine.scheduler.runner.model_folder
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).eval()
    pad_id = engine.tokenizer.pad_token_id or 0
    requests = make_requests(args.num_requests, engine.scheduler.vocab_size)
    out_tokens = sum(m for _, m in requests)

    run_engine(engine, make_requests(4, engine.scheduler.vocab_size, seed=1))  # warm-up
    engine_s = run_engine(engine, requests)
    hf_s = run_hf(hf, requests, args.hf_batch_size, pad_id)
    prompt = requests[0][0][:32]
    # best of three, alternating, for both: single-stream speed on these shared CPUs is noisy
    engine_single = hf_single = 0.0
    for _ in range(3):
        engine_single = max(
            engine_single, single_stream_engine(engine, prompt, args.single_stream_tokens)
        )
        hf_single = max(hf_single, single_stream_hf(hf, prompt, args.single_stream_tokens, pad_id))

    figures = {
        "bench": "offline",
        "dtype": args.dtype,
        "requests": len(requests),
        "output_tokens": out_tokens,
        "engine_tok_s": round(out_tokens / engine_s, 1),
        "hf_tok_s": round(out_tokens / hf_s, 1),
        "throughput_ratio": round(hf_s / engine_s, 2),
        "engine_single_decode_tok_s": round(engine_single, 1),
        "hf_single_decode_tok_s": round(hf_single, 1),
        "single_decode_ratio": round(engine_single / hf_single, 2),
    }
    print(f"mixed workload: {len(requests)} requests, {out_tokens} output tokens, {args.dtype}")
    print(f"  radixgen Engine      {figures['engine_tok_s']:8.1f} tok/s ({engine_s:.1f} s)")
    print(
        f"  transformers (bs={args.hf_batch_size}) {figures['hf_tok_s']:8.1f} tok/s ({hf_s:.1f} s)"
    )
    print(f"  ratio {figures['throughput_ratio']}x")
    print(
        f"single-stream decode: radixgen {engine_single:.1f} tok/s, transformers {hf_single:.1f} tok/s"
    )
    print(json.dumps(figures))
    engine.shutdown()


if __name__ == "__main__":
    main()
