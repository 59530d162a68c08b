"""The GPU check: Triton kernel timings (achieved GB/s and TFLOP/s), Engine decode tok/s at
batch 1 / 32 / 128 with and without CUDA graphs against transformers' generate on the same
model, prefix reuse, and a JSON-schema-constrained batch, on random-weight models in the
SmolLM2-135M and Llama-1B shapes (the SmolLM2 GGUF is too big to bring to a GPU machine; only
its tokenizer files travel). Ends with one JSON line.

    python benchmarks/gpu_check.py --tokenizer DIR      # on a CUDA machine (gpu_check.sh)
    python benchmarks/gpu_check.py --smoke              # tiny shapes, any device: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

if not torch.cuda.is_available():  # --smoke on a CPU: the kernels in Triton's interpreter
    os.environ["TRITON_INTERPRET"] = "1"

VOCAB = 49152
SHAPES = {
    "smollm2_135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    ),
    "llama_1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
}
SMOKE_SHAPES = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str, repeat: int) -> float:
    """Seconds per call, after one warm-up call."""
    fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeat


def kernel_timings(device: str, smoke: bool, decode: bool = True) -> dict:
    """Decode: 64 requests x 2,048 cached tokens (GB/s of K/V read); extend: 8 x 512 new
    tokens over 1,024 cached (TFLOP/s of QK^T and PV); bf16, 32 heads, 8 KV heads, dim 128."""
    from kernels import decode_attention_fwd, extend_attention_fwd

    dt = torch.bfloat16
    heads, kv_heads, dim = (4, 2, 64) if smoke else (32, 8, 128)
    batch, length = (2, 64) if smoke else (64, 2048)
    reqs, new, prefix = (2, 16, 32) if smoke else (8, 512, 1024)
    slots = batch * length + reqs * prefix + 1
    k_buf = torch.randn(slots, kv_heads, dim, device=device, dtype=dt)
    v_buf = torch.randn(slots, kv_heads, dim, device=device, dtype=dt)
    repeat = 2 if smoke else 20
    out = {}
    kv_indptr = torch.arange(0, (batch + 1) * length, length, device=device, dtype=torch.int32)
    kv_indices = (torch.randperm(slots - 1, device=device)[: batch * length] + 1).int()
    q = torch.randn(batch, heads, dim, device=device, dtype=dt)
    o = torch.empty_like(q)
    kinds = (
        ("decode", k_buf, v_buf),
        ("decode_fp8", k_buf.to(torch.float8_e4m3fn), v_buf.to(torch.float8_e4m3fn)),
    )
    for name, kb, vb in kinds if decode else ():
        t = timed(
            lambda kb=kb, vb=vb: decode_attention_fwd(q, kb, vb, o, kv_indptr, kv_indices, 8),
            device,
            repeat,
        )
        read = 2 * batch * length * kv_heads * dim * kb.element_size()
        out[f"{name}_ms"] = round(1000 * t, 4)
        out[f"{name}_gb_s"] = round(read / t / 1e9, 1)
    qo = torch.arange(0, (reqs + 1) * new, new, device=device, dtype=torch.int32)
    kvp = torch.arange(0, (reqs + 1) * prefix, prefix, device=device, dtype=torch.int32)
    idx = (torch.randperm(slots - 1, device=device)[: reqs * prefix] + 1).int()
    qe = torch.randn(reqs * new, heads, dim, device=device, dtype=dt)
    ke = torch.randn(reqs * new, kv_heads, dim, device=device, dtype=dt)
    ve = torch.randn_like(ke)
    oe = torch.empty_like(qe)
    t = timed(
        lambda: extend_attention_fwd(qe, ke, ve, oe, k_buf, v_buf, qo, kvp, idx), device, repeat
    )
    flops = 4 * reqs * heads * dim * new * (prefix + new / 2)  # causal half of the new block
    out["extend_ms"] = round(1000 * t, 4)
    out["extend_tflop_s"] = round(flops / t / 1e12, 2)
    return out


EXTEND_CONFIGS = [  # BLOCK_M, BLOCK_N, warps, stages: the first is the kernel's own choice
    (128, 64, 8, 2),
    (128, 64, 8, 3),
    (128, 64, 4, 3),
    (128, 128, 8, 2),
    (128, 32, 4, 3),
    (64, 64, 4, 3),
    (64, 128, 4, 2),
    (64, 32, 4, 4),
]


def extend_sweep(device: str, smoke: bool) -> dict:
    """The extend kernel's TFLOP/s (the shape of kernel_timings) for each block configuration
    in EXTEND_CONFIGS, chosen by replacing the kernel's own choice for the call."""
    from kernels import triton_ops

    chosen = triton_ops._extend_blocks
    out = {}
    try:
        for bm, bn, warps, stages in EXTEND_CONFIGS[: 2 if smoke else None]:
            triton_ops._extend_blocks = lambda q, d, c=(bm, bn, warps, stages): (
                c[0],
                c[1],
                {"num_warps": c[2], "num_stages": c[3]} if q.is_cuda else {},
            )
            try:
                figures = kernel_timings(device, smoke, decode=False)
                out[f"{bm}x{bn}_w{warps}_s{stages}"] = figures["extend_tflop_s"]
            except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
                out[f"{bm}x{bn}_w{warps}_s{stages}"] = f"{type(exc).__name__}"
    finally:
        triton_ops._extend_blocks = chosen
    return out


def profile_decode(folder: str, device: str, batches, overlap: str) -> dict:
    """torch.profiler over 16 decode steps at each batch size (graphs on): the host ops that
    take the most time a step, printed as a table; returned: ms per step with the profiler on
    and the top five ops' self CPU ms per step."""
    from torch.profiler import ProfilerActivity, profile

    engine = make_engine(folder, device, overlap_schedule=overlap)
    out = {}
    try:
        for b in batches:
            prompts = [[100 + i, 200, 300, 400] for i in range(b)]
            params = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
            engine.generate(input_ids=prompts, sampling_params=params)
            sync(device)
            activities = [ProfilerActivity.CPU] + (
                [ProfilerActivity.CUDA] if device == "cuda" else []
            )
            with profile(activities=activities) as prof:
                t = time.perf_counter()
                engine.generate(input_ids=prompts, sampling_params=params)
                sync(device)
                elapsed = time.perf_counter() - t
            table = prof.key_averages()
            print(f"profile batch {b} overlap {overlap}", flush=True)
            print(table.table(sort_by="self_cpu_time_total", row_limit=22), flush=True)
            top = sorted(table, key=lambda e: -e.self_cpu_time_total)[:5]
            out[f"batch_{b}"] = {
                "ms_per_step": round(1000 * elapsed / 16, 3),
                "top_self_cpu_ms_per_step": {
                    e.key: round(e.self_cpu_time_total / 1000 / 16, 3) for e in top
                },
            }
    finally:
        engine.shutdown()
    return out


def random_model(shape: dict, tokenizer_dir: str, device: str) -> str:
    """A Llama with random bf16 weights of `shape`, saved with the given tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from runtime.model.loader import copy_tokenizer_files

    folder = tempfile.mkdtemp(prefix="gpu-check-")
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():  # small weights keep the random model's activations finite
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    model.save_pretrained(folder)
    copy_tokenizer_files(tokenizer_dir, folder)
    return folder


def make_engine(folder: str, device: str, **options):
    from runtime import Engine

    base = dict(
        model_path=folder,
        device=device,
        dtype="bfloat16" if device == "cuda" else "float32",
        log_level="warning",
        max_running_requests=128,
        max_total_tokens=200_000 if device == "cuda" else 20_000,
    )
    return Engine(**{**base, **options})


def engine_decode(
    folder: str, device: str, batches, new_tokens: int, graphs: bool, **options
) -> tuple[dict, list]:
    """Aggregate greedy decode tok/s of each batch of 4-token prompts (after a warm-up), and
    the greedy tokens of 8 fixed prompts (to compare configurations)."""
    start = time.perf_counter()
    engine = make_engine(folder, device, disable_cuda_graph=not graphs, **options)
    result = {"start_s": round(time.perf_counter() - start, 1)}
    runner = engine.scheduler.runner
    result["graphs"] = len(runner.decode_graphs.graphs) if runner.decode_graphs else 0
    try:
        return _decode_runs(engine, device, batches, new_tokens, result)
    finally:
        engine.shutdown()


def _decode_runs(engine, device: str, batches, new_tokens: int, result: dict):
    for b in batches:
        prompts = [[100 + i, 200, 300, 400] for i in range(b)]
        params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
        engine.generate(input_ids=prompts, sampling_params={**params, "max_new_tokens": 4})
        sync(device)
        t = time.perf_counter()
        engine.generate(input_ids=prompts, sampling_params=params)
        sync(device)
        result[f"batch_{b}_tok_s"] = round(b * new_tokens / (time.perf_counter() - t), 1)
    prompts = [[11 * i + 5, 300 + i, 7000] for i in range(8)]
    outs = engine.generate(
        input_ids=prompts, sampling_params={"max_new_tokens": 24, "temperature": 0}
    )
    return result, [o["output_ids"] for o in outs]


def same_tokens(a: list, b: list) -> float:
    """The share of positions where two runs' greedy tokens agree."""
    pairs = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
    return round(sum(x == y for x, y in pairs) / max(len(pairs), 1), 3)


def hf_generate(folder: str, device: str, batches, new_tokens: int) -> dict:
    """transformers' generate on the same weights: the baseline."""
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    result = {}
    for b in batches:
        ids = torch.tensor([[100 + i, 200, 300, 400] for i in range(b)], device=device)
        kwargs = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)
            sync(device)
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
            sync(device)
        result[f"batch_{b}_tok_s"] = round(b * new_tokens / (time.perf_counter() - t), 1)
    del model
    return result


def prefix_reuse(folder: str, device: str, smoke: bool) -> dict:
    """32 requests sharing a 3,000-token prefix, each with 50 tokens of its own, 64 new tokens:
    seconds with the radix cache and with --disable-radix-cache."""
    n, shared, own, new = (4, 60, 5, 4) if smoke else (32, 3000, 50, 64)
    prefix = [(7 * i) % 40000 + 3 for i in range(shared)]
    prompts = [prefix + [(i * 131 + j) % 40000 + 3 for j in range(own)] for i in range(n)]
    params = {"max_new_tokens": new, "temperature": 0, "ignore_eos": True}
    result = {}
    for name, disable in (("radix", False), ("no_cache", True)):
        engine = make_engine(folder, device, disable_radix_cache=disable)
        engine.generate(input_ids=[[5, 6, 7]], sampling_params={"max_new_tokens": 2})
        sync(device)
        t = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        sync(device)
        result[f"{name}_s"] = round(time.perf_counter() - t, 3)
        result[f"{name}_cached_tokens"] = sum(o["meta_info"]["cached_tokens"] for o in outs)
        engine.shutdown()
    result["speedup"] = round(result["no_cache_s"] / result["radix_s"], 2)
    return result


def constrained_batch(folder: str, device: str, smoke: bool) -> dict:
    """32 requests under one JSON schema (sampled, temperature 1) against the same batch
    unconstrained: tok/s of each, and how many constrained outputs parse and fit the schema."""
    n, new = (4, 48) if smoke else (32, 96)
    prompts = [[100 + i, 200, 300] for i in range(n)]
    engine = make_engine(folder, device)
    result = {}
    for name, extra in (
        ("free", {"ignore_eos": True}),
        ("json", {"json_schema": json.dumps(SCHEMA)}),
    ):
        params = {"max_new_tokens": new, "temperature": 1.0, "seed": 1, **extra}
        sync(device)
        t = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        sync(device)
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        result[f"{name}_tok_s"] = round(tokens / (time.perf_counter() - t), 1)
        if name == "json":
            result["json_valid"] = sum(_fits_schema(o["text"]) for o in outs)
            result["json_requests"] = n
            result["json_finished_by_grammar"] = sum(
                o["meta_info"]["finish_reason"]["type"] != "length" for o in outs
            )
    engine.shutdown()
    return result


def _fits_schema(text: str) -> bool:
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and set(doc) == {"name", "age", "role"}
        and isinstance(doc["name"], str)
        and len(doc["name"]) <= 12
        and type(doc["age"]) is int
        and 0 <= doc["age"] <= 120
        and doc["role"] in ("admin", "user", "guest")
    )


def guarded(entry: dict, key: str, fn, *args, **kwargs):
    """entry[key] = fn(...); a failure is printed and kept as the section's error, and the
    check goes on with the next section (one GPU run should say all it can)."""
    try:
        entry[key] = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure is a finding to report
        traceback.print_exc()
        entry[key] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    print(key, entry[key], flush=True)
    return entry[key]


def default_tokenizer() -> str:
    from runtime.model.loader import resolve_model_path

    return os.environ.get("RADIXGEN_TOKENIZER_DIR") or resolve_model_path("smollm2")


def check_shape(name, shape, tokenizer, device, batches, new_tokens, smoke, wanted) -> dict:
    """Every Engine and baseline figure of one random-weight model that `wanted` (a set of
    section names) asks for; a failing section is reported and the rest still run."""
    entry = {}
    try:
        folder = random_model(shape, tokenizer, device)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    tokens = {}

    def decode(key, graphs, **options):
        result, tokens[key] = engine_decode(folder, device, batches, new_tokens, graphs, **options)
        return result

    def fast_switch_decode():  # the GIL handed between the two threads every 0.2 ms, not 5
        before = sys.getswitchinterval()
        sys.setswitchinterval(0.0002)
        try:
            return decode("fast_switch", True, overlap_schedule="on")
        finally:
            sys.setswitchinterval(before)

    big = name in ("llama_1b", "tiny")
    runs = [
        ("graphs", "graphs", lambda: decode("graphs", True, overlap_schedule="on")),
        ("eager", "eager", lambda: decode("eager", False, overlap_schedule="on")),
        ("no_overlap", "no_overlap", lambda: decode("no_overlap", True, overlap_schedule="off")),
        ("fast_switch", "fast_switch", fast_switch_decode),
        ("fp8_kv", "fp8", lambda: decode("fp8", True, kv_cache_dtype="fp8_e4m3")),
    ]
    for key, section, run in runs:
        if section in wanted and (big or section not in ("fp8",)):
            guarded(entry, key, run)
    for key in ("eager", "no_overlap", "fast_switch", "fp8"):
        if key in tokens and "graphs" in tokens:
            entry[f"{key}_same_tokens_as_graphs"] = same_tokens(tokens[key], tokens["graphs"])
    if "transformers" in wanted:
        guarded(entry, "transformers", hf_generate, folder, device, batches[:2], new_tokens)
    if "prefix" in wanted and big:
        guarded(entry, "prefix_reuse", prefix_reuse, folder, device, smoke)
    if "constrained" in wanted and name in ("smollm2_135m", "tiny"):
        guarded(entry, "constrained", constrained_batch, folder, device, smoke)
    if "profile" in wanted and big:
        for overlap in ("off", "on"):
            guarded(
                entry,
                f"profile_overlap_{overlap}",
                profile_decode,
                folder,
                device,
                batches[::2],
                overlap,
            )
    return entry


SECTIONS = "kernels,graphs,eager,no_overlap,fp8,transformers,prefix,constrained"
EXTRAS = "sweep,profile,fast_switch"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default=None, help="folder with SmolLM2's tokenizer files")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, few tokens, any device")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,32,128", help="decode batch sizes")
    parser.add_argument("--tests", default="", help="the GPU test runs' counts (gpu_check.sh)")
    parser.add_argument("--skip", default="", help=f"sections to leave out, of {SECTIONS}")
    parser.add_argument("--extra", default="", help=f"sections to add, of {EXTRAS}")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = args.tokenizer or default_tokenizer()
    batches = (1, 4) if args.smoke else tuple(int(b) for b in args.batches.split(","))
    new_tokens = 8 if args.smoke else args.new_tokens
    figures = {"bench": "gpu_check", "device": _device_name(device), "tests": args.tests}
    wanted = set(SECTIONS.split(",")) - set(args.skip.split(",")) | set(args.extra.split(","))
    if "kernels" in wanted:
        guarded(figures, "kernels", kernel_timings, device, args.smoke)
    if "sweep" in wanted:
        guarded(figures, "extend_sweep", extend_sweep, device, args.smoke)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    for name, shape in shapes.items():
        figures[name] = check_shape(
            name, shape, tokenizer, device, batches, new_tokens, args.smoke, wanted
        )
    print(json.dumps(figures))


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


if __name__ == "__main__":
    main()
