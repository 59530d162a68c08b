"""Host time of a decode step: the scheduler, sampler and model-dispatch work a step costs
besides the model's arithmetic, measured on a one-layer model of width 32 (its arithmetic is
negligible except the LM head, which is timed alone and subtracted). On a GPU this host work is
what bounds small models and large batches, so it is the CPU-measurable part of the GPU path.

    python benchmarks/bench_host_step.py [--batches 1,32,128] [--steps 64]

Prints per batch size: ms per step, the LM head's share, and the host ms left; one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,32,128")
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from runtime import Engine
    from tests.runtime.conftest import make_tiny_model, tokenizer_folder

    folder = make_tiny_model(
        tempfile.mkdtemp(prefix="host-step-"),
        tokenizer_folder(),
        "llama",
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    batches = [int(b) for b in args.batches.split(",")]
    engine = Engine(
        model_path=folder,
        dtype="float32",
        max_running_requests=max(batches),
        max_total_tokens=max(batches) * (args.steps + 16),
        log_level="warning",
        cpu_threads=1,
    )
    head = engine.scheduler.runner.model
    figures = {"bench": "host_step", "steps": args.steps}
    for b in batches:
        prompts = [[100 + i, 200, 300, 400] for i in range(b)]
        params = {"max_new_tokens": args.steps, "temperature": 0, "ignore_eos": True}
        engine.generate(input_ids=prompts, sampling_params={**params, "max_new_tokens": 2})
        start = time.perf_counter()
        engine.generate(input_ids=prompts, sampling_params=params)
        step_ms = (time.perf_counter() - start) / args.steps * 1000
        hidden = torch.randn(b, 32)
        head.compute_logits(hidden)
        start = time.perf_counter()
        for _ in range(20):
            head.compute_logits(hidden)
        head_ms = (time.perf_counter() - start) / 20 * 1000
        figures[f"batch_{b}"] = {
            "step_ms": round(step_ms, 3),
            "lm_head_ms": round(head_ms, 3),
            "host_ms": round(step_ms - head_ms, 3),
        }
        print(b, figures[f"batch_{b}"], flush=True)
    engine.shutdown()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
