"""The fused decoder-layer kernels (kernels.fused_ops) against their torch references, on the
GPU when there is one, else in Triton's interpreter; and a model whose layers use them
against the same model on torch's ops."""

import pytest
import torch

from kernels import (
    rms_norm,
    rms_norm_ref,
    rotary_qkv_inplace,
    rotary_qkv_inplace_ref,
    silu_mul,
    silu_mul_ref,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# one rounding to the output dtype apart at most (sums in another order)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rand(*shape, dtype, gen, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(DEVICE, dtype)


def close(got, want, dtype):
    err = ((got.float() - want.float()).abs() / (want.float().abs() + 1)).max().item()
    assert err <= TOL[dtype], err


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, cols", [(1, 64), (5, 576), (3, 2048), (2, 100)])
def test_fused_rms_norm(rows, cols, dtype):
    gen = torch.Generator().manual_seed(rows * cols)
    x = rand(rows, cols, dtype=dtype, gen=gen, scale=3)
    w = rand(cols, dtype=dtype, gen=gen)
    close(rms_norm(x, w, 1e-5), rms_norm_ref(x, w, 1e-5), dtype)
    residual = rand(rows, cols, dtype=dtype, gen=gen)
    res_ref = residual.clone()
    out = rms_norm(x, w, 1e-6, residual=residual)
    want = rms_norm_ref(x, w, 1e-6, residual=res_ref)
    close(residual, res_ref, dtype)  # the sum, kept in place
    close(out, want, dtype)
    assert not torch.equal(residual, x)


def test_fused_rms_norm_matches_the_module_on_float32():
    from runtime.model.layers import RMSNorm

    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(256, 1e-5).to(DEVICE)
    norm.weight.data = rand(256, dtype=torch.float32, gen=gen)
    x = rand(7, 256, dtype=torch.float32, gen=gen)
    want = torch.nn.functional.rms_norm(x, (256,), norm.weight, 1e-5)
    close(rms_norm(x, norm.weight, 1e-5), want, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(9, 3, 64), (4, 4, 128), (2, 1, 80)])
def test_fused_rotary_in_place(heads, kv_heads, head_dim, dtype):
    from runtime.model.config import RopeConfig
    from runtime.model.layers import RotaryEmbedding

    gen = torch.Generator().manual_seed(head_dim)
    emb = RotaryEmbedding(head_dim, 512, RopeConfig()).to(DEVICE)
    tokens = 6
    qkv = rand(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype, gen=gen)
    positions = torch.tensor([0, 1, 7, 300, 511, 2], device=DEVICE)
    want = qkv.clone()
    rotary_qkv_inplace(qkv, heads + kv_heads, head_dim, positions, emb.cos, emb.sin)
    rotary_qkv_inplace_ref(want, heads + kv_heads, head_dim, positions, emb.cos, emb.sin)
    close(qkv, want, dtype)
    v = slice((heads + kv_heads) * head_dim, None)
    assert torch.equal(qkv[:, v], want[:, v])  # the v heads untouched


def test_fused_rotary_matches_the_torch_rotation_on_float32():
    from runtime.model.config import RopeConfig
    from runtime.model.layers import RotaryEmbedding, apply_rotary

    gen = torch.Generator().manual_seed(1)
    emb = RotaryEmbedding(64, 128, RopeConfig()).to(DEVICE)
    qkv = rand(5, 4 * 64, dtype=torch.float32, gen=gen)
    positions = torch.tensor([3, 0, 127, 9, 64], device=DEVICE)
    q, k = qkv[:, :128].reshape(5, 2, 64), qkv[:, 128:192].reshape(5, 1, 64)
    want_q, want_k = apply_rotary(q, k, emb.table(positions, torch.float32))
    rotary_qkv_inplace(qkv, 3, 64, positions, emb.cos, emb.sin)
    close(qkv[:, :128].reshape(5, 2, 64), want_q, torch.float32)
    close(qkv[:, 128:192].reshape(5, 1, 64), want_k, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, inter", [(1, 1536), (4, 8192), (3, 100)])
def test_fused_silu_mul(rows, inter, dtype):
    gen = torch.Generator().manual_seed(inter)
    gate_up = rand(rows, 2 * inter, dtype=dtype, gen=gen, scale=4)
    close(silu_mul(gate_up), silu_mul_ref(gate_up), dtype)
    gate, up = gate_up.float().chunk(2, dim=-1)
    close(silu_mul(gate_up), torch.nn.functional.silu(gate) * up, dtype)


def test_empty_batches_launch_nothing():
    x = torch.empty(0, 64, device=DEVICE)
    assert rms_norm(x, torch.ones(64, device=DEVICE), 1e-5).shape == (0, 64)
    assert silu_mul(torch.empty(0, 128, device=DEVICE)).shape == (0, 64)
    rotary_qkv_inplace(x, 1, 64, torch.empty(0, dtype=torch.long), x, x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_model_on_the_fused_kernels_matches_torch_ops(tmp_path, monkeypatch, dtype):
    """A tiny Llama's greedy tokens and their logprobs with every layer's norms, residual adds,
    rotary and SiLU on kernels.fused_ops (as on CUDA; forced here where there is no GPU)
    against the same model on torch's ops."""
    from runtime import Engine
    from runtime.model import layers
    from tests.runtime.conftest import make_tiny_model, tokenizer_folder

    folder = make_tiny_model(str(tmp_path), tokenizer_folder(), "llama")
    engine = Engine(
        model_path=folder,
        device=DEVICE,
        dtype=dtype,
        log_level="error",
        max_total_tokens=512,
        disable_radix_cache=True,  # each run computes its own KV
        disable_cuda_graph=True,
    )
    prompts = [[5, 6, 7, 8, 9], [300, 301]]
    params = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
    launched = []

    def run(fused: bool):
        def chosen(x):
            on = fused and x.dim() == 2 and x.stride(-1) == 1
            launched.append(on)
            return on

        monkeypatch.setattr(layers, "fused_kernels", chosen)
        outs = engine.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
        logprobs = [[x[0] for x in o["meta_info"]["output_token_logprobs"]] for o in outs]
        return logprobs, [o["output_ids"] for o in outs]

    try:
        lp_fused, ids_fused = run(True)
        assert any(launched)
        lp_torch, ids_torch = run(False)
    finally:
        engine.shutdown()
    assert ids_fused == ids_torch
    tol = 1e-4 if dtype == "float32" else 3e-2
    for a, b in zip(lp_fused, lp_torch):
        assert a == pytest.approx(b, abs=tol)
