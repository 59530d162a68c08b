"""CPU speed on the default model file: radixgen's quantized and float paths, transformers and
llama.cpp (llama-cpp-python, when installed) on the same prompts.

Each engine runs in a process of its own (so peak RSS is its own), engines alternating within
each round, best figure of the rounds kept: prefill of 512 and 2,048 new tokens, greedy decode
at batch 1 (--tokens new tokens), 16 and 64 (--batch-tokens new tokens each). llama.cpp serves
one sequence at a time, so its batch figures are its single stream. Prints a table and ends
with one JSON line.

    python benchmarks/bench_cpu.py [--rounds 1] [--threads 2] [--engines radixgen-int4,...]
        [--model smollm2 | path/to/model.gguf]

llama.cpp: `pip install llama-cpp-python` (builds from source in ~10 minutes; add
CMAKE_ARGS="-DGGML_NATIVE=ON" for this CPU's instructions); skipped when not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENGINES = {
    "radixgen-int4": {"quantization": "int4", "dtype": "float32"},
    # the file's own precision (what `--quantization auto` serves): an int4 model whose layers
    # of more bits run int8, or an int8 model whose 4-bit layers run int4
    "radixgen-auto": {"quantization": "auto", "dtype": "float32"},
    # the same without AMX tiles (AVX-512 BF16 dot products on the bf16 tiles where the CPU has
    # them, else the int4 codes at every size)
    "radixgen-int4-no-amx": {"quantization": "int4", "dtype": "float32"},
    # the same without bf16 tiles at all: the int4 codes at every size
    "radixgen-int4-codes": {"quantization": "int4", "dtype": "float32"},
    # the same without the AVX-512 VNNI products (the AVX2 ones, on a CPU with avx512_vnni)
    "radixgen-int4-no-avx512": {"quantization": "int4", "dtype": "float32"},
    "radixgen-float32": {"quantization": "none", "dtype": "float32"},
    "radixgen-bf16": {"quantization": "none", "dtype": "bfloat16"},
    # tensor parallelism over gloo, for information (the two ranks split --threads between
    # them; peak RSS is rank 0's process only)
    "radixgen-float32-tp2": {"quantization": "none", "dtype": "float32", "tp_size": 2},
    "transformers-bf16": {},
    "llama.cpp": {},
}
ENVIRONMENTS = {
    "radixgen-int4-no-amx": {"RADIXGEN_NO_AMX": "1"},
    "radixgen-int4-codes": {"RADIXGEN_NO_BF16_TILES": "1"},
    "radixgen-int4-no-avx512": {"RADIXGEN_NO_AVX512": "1"},
}
PREFILLS = {"prefill_512": list(range(1000, 1512)), "prefill_2048": list(range(2000, 4048))}


def decode_prompts(batch: int) -> list[list[int]]:
    return [[5, 6, 7 + i, 300 + batch] for i in range(batch)]  # no shared prefix across runs


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_radixgen(name: str, args) -> dict:
    from runtime import Engine

    settings = ENGINES[name]
    threads = max(1, args.threads // settings.get("tp_size", 1))
    engine = Engine(model_path=args.model, log_level="warning", cpu_threads=threads, **settings)
    figures = {"rss_after_load_mb": current_rss_mb()}
    try:
        engine.generate(input_ids=[3000, 3001, 3002], sampling_params={"max_new_tokens": 2})
        for key, prompt in PREFILLS.items():
            t = seconds(
                lambda p=prompt: engine.generate(input_ids=p, sampling_params={"max_new_tokens": 1})
            )
            figures[key] = len(prompt) / t
        for batch in (1, 16, 64):
            tokens = args.tokens if batch == 1 else args.batch_tokens
            params = {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 0}
            prompts = decode_prompts(batch)
            t = seconds(lambda p=prompts, s=params: engine.generate(input_ids=p, sampling_params=s))
            figures[f"decode_b{batch}"] = batch * tokens / t
    finally:
        engine.shutdown()
    return figures


def run_transformers(name: str, args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from runtime.model.loader import resolve_model_path

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(args.model), dtype=torch.bfloat16
    ).eval()
    figures = {"rss_after_load_mb": current_rss_mb()}
    with torch.inference_mode():
        for key, prompt in PREFILLS.items():
            ids = torch.tensor([prompt])
            figures[key] = len(prompt) / seconds(lambda i=ids: model(i))
        for batch in (1, 16, 64):
            tokens = args.tokens if batch == 1 else args.batch_tokens
            ids = torch.tensor(decode_prompts(batch))

            def generate(i=ids, n=tokens):
                model.generate(
                    i,
                    attention_mask=torch.ones_like(i),
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=False,
                    pad_token_id=0,
                )

            figures[f"decode_b{batch}"] = batch * tokens / seconds(generate)
    return figures


def run_llama_cpp(name: str, args) -> dict:
    from llama_cpp import Llama

    from runtime.model.loader import gguf_file

    llm = Llama(
        model_path=gguf_file(args.model),
        n_ctx=4096,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,  # its default is every core, for prefill
        verbose=False,
    )
    figures = {"rss_after_load_mb": current_rss_mb()}
    for key, prompt in PREFILLS.items():
        llm.reset()
        figures[key] = len(prompt) / seconds(lambda p=prompt: llm.eval(p))

    def decode(n: int) -> None:
        llm.reset()
        llm.eval(decode_prompts(1)[0])
        for _ in range(n):
            llm.eval([llm.sample(temp=0.0)])

    single = args.tokens / seconds(lambda: decode(args.tokens))
    figures.update(decode_b1=single, decode_b16=single, decode_b64=single)
    return figures


def worker(name: str, args) -> None:
    run = (
        run_radixgen
        if name.startswith("radixgen")
        else run_transformers
        if name.startswith("transformers")
        else run_llama_cpp
    )
    figures = run(name, args)
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(figures))


def available(name: str) -> bool:
    if name != "llama.cpp":
        return True
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def measure(name: str, args) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", name]
    command += ["--threads", str(args.threads), "--tokens", str(args.tokens)]
    command += ["--batch-tokens", str(args.batch_tokens), "--model", args.model]
    env = {**os.environ, **ENVIRONMENTS.get(name, {})}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens at batch 1")
    parser.add_argument("--batch-tokens", type=int, default=32, help="new tokens per stream")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--model", default="smollm2", help="the alias or a .gguf file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args)
    from runtime.model.qgemv import avx512_vnni
    from runtime.model.quantization import tile_kind

    print(f"bf16 tiles on this CPU: {tile_kind() or 'none'}")
    print(f"AVX-512 VNNI on this CPU: {'yes' if avx512_vnni() else 'no'}")
    names = [n for n in args.engines.split(",") if n]
    skipped = [n for n in names if not available(n)]
    names = [n for n in names if n not in skipped]
    for name in skipped:
        print(f"{name}: not installed, skipped")
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else reversed(names):
            figures = measure(name, args)
            kept = best.setdefault(name, figures)
            for key, value in figures.items():
                better = min if "rss" in key else max
                kept[key] = better(kept[key], value)
    keys = ["decode_b1", "decode_b16", "decode_b64", "prefill_512", "prefill_2048"]
    print(f"{'engine':>18} | " + " | ".join(f"{k:>12}" for k in keys) + " | peak RSS MB")
    for name, figures in best.items():
        row = " | ".join(f"{figures[k]:12.1f}" for k in keys)
        print(f"{name:>18} | {row} | {figures['peak_rss_mb']:8.0f}")
    ratios = {}
    for base in ("radixgen-float32", "radixgen-bf16"):
        if "radixgen-int4" in best and base in best:
            ratios[base] = {k: best["radixgen-int4"][k] / best[base][k] for k in keys}
            shown = ", ".join(f"{k} {v:.2f}x" for k, v in ratios[base].items())
            print(f"int4 / {base.removeprefix('radixgen-')}: {shown}")
    tp2 = None
    if "radixgen-float32-tp2" in best and "radixgen-float32" in best:
        tp2 = {k: best["radixgen-float32-tp2"][k] / best["radixgen-float32"][k] for k in keys}
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in tp2.items())
        print(f"float32 tp2 / tp1 (same threads in all): {shown}")
    for ours_name in ("radixgen-int4", "radixgen-auto"):
        if "llama.cpp" in best and ours_name in best:
            ours, theirs = best[ours_name], best["llama.cpp"]
            print(
                f"{ours_name.removeprefix('radixgen-')} / llama.cpp: batch 1 "
                f"{ours['decode_b1'] / theirs['decode_b1']:.2f}x, "
                f"batch 16 aggregate {ours['decode_b16'] / theirs['decode_b1']:.2f}x"
            )
    print(
        json.dumps(
            {
                "bench": "cpu",
                "cpu_tiles": tile_kind(),
                "threads": args.threads,
                "rounds": args.rounds,
                "skipped": skipped,
                "figures": best,
                "int4_over": ratios,
                "tp2_over_tp1": tp2,
            }
        )
    )


if __name__ == "__main__":
    main()
