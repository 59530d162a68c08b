"""Timings on a CUDA GPU: Triton kernels against the torch references, and Engine decode tok/s
(bf16) at batch 1, 32 and 128 for SmolLM2 and a random-weight 1B-class Llama. One JSON line."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from kernels import (  # noqa: E402
    decode_attention_fwd,
    decode_attention_ref,
    extend_attention_fwd,
    extend_attention_ref,
)


def cuda_time(fn, repeat=20) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def kernel_timings() -> dict:
    dev, dt = "cuda", torch.bfloat16
    heads, kv_heads, dim, slots = 32, 8, 128, 300_000
    k_buf = torch.randn(slots, kv_heads, dim, device=dev, dtype=dt)
    v_buf = torch.randn(slots, kv_heads, dim, device=dev, dtype=dt)
    out = {}
    # decode: 64 requests x 2048 cached tokens
    batch, length = 64, 2048
    kv_indptr = torch.arange(0, (batch + 1) * length, length, device=dev, dtype=torch.int32)
    kv_indices = torch.randperm(slots - 1, device=dev)[: batch * length].int() + 1
    q = torch.randn(batch, heads, dim, device=dev, dtype=dt)
    o = torch.empty_like(q)
    out["decode_triton_ms"] = 1000 * cuda_time(
        lambda: decode_attention_fwd(q, k_buf, v_buf, o, kv_indptr, kv_indices, 8)
    )
    out["decode_torch_ref_ms"] = 1000 * cuda_time(
        lambda: decode_attention_ref(q, k_buf, v_buf, o, kv_indptr, kv_indices), 3
    )
    # extend: 8 requests x 512 new tokens over 1024 cached tokens
    reqs, new, prefix = 8, 512, 1024
    qo = torch.arange(0, (reqs + 1) * new, new, device=dev, dtype=torch.int32)
    kvp = torch.arange(0, (reqs + 1) * prefix, prefix, device=dev, dtype=torch.int32)
    idx = torch.randperm(slots - 1, device=dev)[: reqs * prefix].int() + 1
    qe = torch.randn(reqs * new, heads, dim, device=dev, dtype=dt)
    ke = torch.randn(reqs * new, kv_heads, dim, device=dev, dtype=dt)
    ve = torch.randn_like(ke)
    oe = torch.empty_like(qe)
    out["extend_triton_ms"] = 1000 * cuda_time(
        lambda: extend_attention_fwd(qe, ke, ve, oe, k_buf, v_buf, qo, kvp, idx)
    )
    out["extend_torch_ref_ms"] = 1000 * cuda_time(
        lambda: extend_attention_ref(qe, ke, ve, oe, k_buf, v_buf, qo, kvp, idx), 3
    )
    return {k: round(v, 3) for k, v in out.items()}


def engine_decode(model_path: str, batches=(1, 32, 128), new_tokens=64) -> dict:
    from runtime import Engine

    engine = Engine(
        model_path=model_path,
        dtype="bfloat16",
        device="cuda",
        log_level="warning",
        max_running_requests=128,
        max_total_tokens=200_000,
    )
    result = {}
    for b in batches:
        prompts = [[100 + i, 200, 300, 400] for i in range(b)]
        params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
        engine.generate(input_ids=prompts, sampling_params={**params, "max_new_tokens": 2})
        start = time.perf_counter()
        engine.generate(input_ids=prompts, sampling_params=params)
        result[f"batch_{b}_tok_s"] = round(b * new_tokens / (time.perf_counter() - start), 1)
    engine.shutdown()
    return result


def one_b_llama_folder() -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    from runtime.model.loader import copy_tokenizer_files, resolve_model_path

    folder = tempfile.mkdtemp(prefix="llama1b-")
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
    )
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    copy_tokenizer_files(resolve_model_path("smollm2"), folder)
    return folder


def main() -> None:
    figures = {"bench": "gpu_check", "device": torch.cuda.get_device_name()}
    figures["kernels"] = kernel_timings()
    print(figures["kernels"], flush=True)
    figures["smollm2"] = engine_decode("smollm2")
    print(figures["smollm2"], flush=True)
    figures["llama_1b_random"] = engine_decode(one_b_llama_folder())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
