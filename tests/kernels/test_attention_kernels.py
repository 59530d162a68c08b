"""Triton kernels against their torch references (on the GPU when there is one, else in
Triton's interpreter), and a whole model on the triton backend against the torch backend."""

import pytest
import torch

from kernels import (
    apply_token_bitmask_inplace,
    apply_token_bitmask_inplace_ref,
    decode_attention_fwd,
    decode_attention_ref,
    extend_attention_fwd,
    extend_attention_ref,
    fill_kv_indices,
    fill_kv_indices_ref,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 2e-3 if DEVICE == "cuda" else 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
CASES = [(ratio, head_dim) for ratio in (1, 3, 8) for head_dim in (64, 80, 96, 128)]


def make_pool(slots: int, kv_heads: int, head_dim: int, dtype, gen):
    # a head-major pool viewed as [slots, kv_heads, head_dim], like runtime.cache.memory_pool
    k = torch.randn(kv_heads, slots, head_dim, generator=gen).to(DEVICE, dtype).transpose(0, 1)
    v = torch.randn(kv_heads, slots, head_dim, generator=gen).to(DEVICE, dtype).transpose(0, 1)
    return k, v


def ragged(lengths, gen, slots):
    """indptr over `lengths` and random, non-contiguous slot indices (slot 0 is never used)."""
    indptr = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    indptr[1:] = torch.tensor(lengths).cumsum(0)
    indices = (torch.randperm(slots - 1, generator=gen)[: int(indptr[-1])] + 1).to(torch.int32)
    return indptr.to(DEVICE), indices.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ratio, head_dim", CASES)
def test_extend_matches_reference(ratio, head_dim, dtype):
    gen = torch.Generator().manual_seed(ratio * 1000 + head_dim)
    kv_heads = 1 if ratio == 8 else 2
    heads = kv_heads * ratio
    prefixes = torch.randint(0, 41, (3,), generator=gen).tolist()
    prefixes[0] = 0
    extends = torch.randint(1, 9, (3,), generator=gen).tolist()
    k_buf, v_buf = make_pool(160, kv_heads, head_dim, dtype, gen)
    qo_indptr, _ = ragged(extends, gen, 160)
    kv_indptr, kv_indices = ragged(prefixes, gen, 160)
    total = sum(extends)
    q = torch.randn(total, heads, head_dim, generator=gen).to(DEVICE, dtype)
    k = torch.randn(total, kv_heads, head_dim, generator=gen).to(DEVICE, dtype)
    v = torch.randn(total, kv_heads, head_dim, generator=gen).to(DEVICE, dtype)
    out, ref = torch.empty_like(q), torch.empty_like(q)
    extend_attention_fwd(q, k, v, out, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices)
    extend_attention_ref(q, k, v, ref, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices)
    assert (out.float() - ref.float()).abs().max() < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ratio, head_dim", CASES)
def test_decode_matches_reference(ratio, head_dim, dtype):
    gen = torch.Generator().manual_seed(ratio * 7 + head_dim)
    kv_heads = 1 if ratio == 8 else 2
    heads = kv_heads * ratio
    lengths = torch.randint(1, 41, (3,), generator=gen).tolist()
    k_buf, v_buf = make_pool(160, kv_heads, head_dim, dtype, gen)
    kv_indptr, kv_indices = ragged(lengths, gen, 160)
    q = torch.randn(3, heads, head_dim, generator=gen).to(DEVICE, dtype)
    for splits in (1, 4):
        out, ref = torch.empty_like(q), torch.empty_like(q)
        decode_attention_fwd(q, k_buf, v_buf, out, kv_indptr, kv_indices, splits)
        decode_attention_ref(q, k_buf, v_buf, ref, kv_indptr, kv_indices)
        assert (out.float() - ref.float()).abs().max() < TOL[dtype]


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_kernels_read_fp8_pools_with_their_scales(kv_dtype):
    """An fp8 KV pool (--kv-cache-dtype) read by both kernels with K and V scales, against the
    references reading the same stored values."""
    gen = torch.Generator().manual_seed(11)
    kv_heads, heads, head_dim, scales = 2, 6, 64, dict(k_scale=0.5, v_scale=2.0)
    k_buf, v_buf = make_pool(160, kv_heads, head_dim, torch.float32, gen)
    k_buf, v_buf = k_buf.to(kv_dtype), v_buf.to(kv_dtype)
    kv_indptr, kv_indices = ragged([5, 33, 17], gen, 160)
    q = torch.randn(3, heads, head_dim, generator=gen).to(DEVICE)
    out, ref = torch.empty_like(q), torch.empty_like(q)
    decode_attention_fwd(q, k_buf, v_buf, out, kv_indptr, kv_indices, 4, **scales)
    decode_attention_ref(q, k_buf, v_buf, ref, kv_indptr, kv_indices, **scales)
    assert (out - ref).abs().max() < TOL[torch.float32]
    unscaled = torch.empty_like(q)  # the scales are applied: without them the result differs
    decode_attention_fwd(q, k_buf, v_buf, unscaled, kv_indptr, kv_indices, 4)
    assert (unscaled - ref).abs().max() > 0.1

    qo_indptr, _ = ragged([3, 1, 4], gen, 160)
    qe = torch.randn(8, heads, head_dim, generator=gen).to(DEVICE)
    ke = torch.randn(8, kv_heads, head_dim, generator=gen).to(DEVICE)
    ve = torch.randn(8, kv_heads, head_dim, generator=gen).to(DEVICE)
    out, ref = torch.empty_like(qe), torch.empty_like(qe)
    args = (k_buf, v_buf, qo_indptr, kv_indptr, kv_indices)
    extend_attention_fwd(qe, ke, ve, out, *args, **scales)
    extend_attention_ref(qe, ke, ve, ref, *args, **scales)
    assert (out - ref).abs().max() < TOL[torch.float32]


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_bf16_queries_over_long_sequences(kv_dtype):
    """bf16 q (what a GPU runs) over a bf16 or fp8 pool, with sequences and extends spanning
    many key blocks (64 on CUDA) and query blocks (128 on CUDA), splits of several blocks."""
    gen = torch.Generator().manual_seed(17)
    kv_heads, heads, head_dim = 2, 8, 64
    k_buf, v_buf = make_pool(1400, kv_heads, head_dim, torch.float32, gen)
    k_buf, v_buf = k_buf.to(kv_dtype), v_buf.to(kv_dtype)
    scales = dict(k_scale=0.75, v_scale=1.25)
    kv_indptr, kv_indices = ragged([600, 130, 1], gen, 1400)
    q = torch.randn(3, heads, head_dim, generator=gen).to(DEVICE, torch.bfloat16)
    out, ref = torch.empty_like(q), torch.empty_like(q)
    decode_attention_fwd(q, k_buf, v_buf, out, kv_indptr, kv_indices, 4, **scales)
    decode_attention_ref(q, k_buf, v_buf, ref, kv_indptr, kv_indices, **scales)
    assert (out.float() - ref.float()).abs().max() < TOL[torch.bfloat16]

    qo_indptr, _ = ragged([140, 65, 1], gen, 1400)
    kv_indptr, kv_indices = ragged([300, 0, 70], gen, 1400)
    qe = torch.randn(206, heads, head_dim, generator=gen).to(DEVICE, torch.bfloat16)
    ke = torch.randn(206, kv_heads, head_dim, generator=gen).to(DEVICE, torch.bfloat16)
    ve = torch.randn(206, kv_heads, head_dim, generator=gen).to(DEVICE, torch.bfloat16)
    out, ref = torch.empty_like(qe), torch.empty_like(qe)
    args = (k_buf, v_buf, qo_indptr, kv_indptr, kv_indices)
    extend_attention_fwd(qe, ke, ve, out, *args, **scales)
    extend_attention_ref(qe, ke, ve, ref, *args, **scales)
    assert (out.float() - ref.float()).abs().max() < TOL[torch.bfloat16]


def test_fill_kv_indices_lays_each_requests_slots_end_to_end():
    gen = torch.Generator().manual_seed(5)
    table = torch.randint(1, 10_000, (6, 700), generator=gen, dtype=torch.int32).to(DEVICE)
    rows = torch.tensor([4, 0, 5, 2], device=DEVICE)
    lens = torch.tensor([1, 600, 0, 257], device=DEVICE)  # past one block of 256, and empty
    indptr = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32)
    out = torch.full((int(lens.sum()) + 3,), -1, dtype=torch.int32, device=DEVICE)
    ref = out.clone()
    fill_kv_indices(table, rows, lens, indptr, out)
    fill_kv_indices_ref(table, rows, lens, indptr, ref)
    assert torch.equal(out, ref) and (out[-3:] == -1).all()


@pytest.mark.parametrize("indices", [None, [0, 2]])
def test_token_bitmask(indices):
    gen = torch.Generator().manual_seed(3)
    vocab = 1000
    logits = torch.randn(3, vocab, generator=gen).to(DEVICE)
    bitmask = torch.randint(
        -(2**31), 2**31 - 1, (3, (vocab + 31) // 32), generator=gen, dtype=torch.int32
    ).to(DEVICE)
    ref = logits.clone()
    apply_token_bitmask_inplace(logits, bitmask, indices)
    apply_token_bitmask_inplace_ref(ref, bitmask, indices)
    assert torch.equal(logits, ref)
    bit = lambda t: (int(bitmask[0, t // 32]) >> (t % 32)) & 1  # noqa: E731
    assert all((logits[0, t] == float("-inf")) == (bit(t) == 0) for t in range(0, vocab, 37))


def test_whole_model_on_triton_backend_matches_torch(tmp_path):
    from runtime import Engine
    from tests.runtime.conftest import make_tiny_model, tokenizer_folder

    folder = make_tiny_model(str(tmp_path), tokenizer_folder(), "llama", seed=5)
    prompts = [[5, 17, 300, 41, 9, 77], [1000, 2000, 3000]]
    outputs = {}
    for backend in ("torch", "triton"):
        engine = Engine(
            model_path=folder,
            dtype="float32",
            attention_backend=backend,
            max_total_tokens=512,
            device=DEVICE,
            log_level="warning",
        )
        outs = engine.generate(
            input_ids=prompts, sampling_params={"max_new_tokens": 6, "temperature": 0}
        )
        outputs[backend] = [o["output_ids"] for o in outs]
    assert outputs["triton"] == outputs["torch"]
