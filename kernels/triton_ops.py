"""Triton kernels: extend and decode attention over the token-index KV pool, and the token bitmask.

Matrix products take q's dtype (bf16/fp16 tensor-core products on a GPU) and every sum,
softmax and accumulation is float32. Under TRITON_INTERPRET=1, whose bfloat16 arithmetic is
wrong, bf16 loads are upcast to float32 first (`_upcast`). Float32 inputs multiply in full
float32 (not TF32), so that they match the reference. Decode reads each K/V block once for all
the query heads that share it (a 16-row product per KV head). Head dims that are not powers of
two (80, 96) run in a power-of-two block with the tail masked.

The KV pool may hold fp8 values (`--kv-cache-dtype fp8_e4m3`): the kernels load any dtype,
convert it to q's, and take `k_scale` / `v_scale`, the factors that map stored values back to
real ones (1.0 for a pool in the model's dtype).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _online_softmax_block(
    q,
    k_ptrs,
    v_ptrs,
    load_mask,
    keep,
    score_scale,
    v_scale,
    m_i,
    l_i,
    acc,
    DOT_PRECISION: tl.constexpr,
):
    """One key/value block of flash attention: update the running max, sum and output.
    `score_scale` is softmax's scale times K's storage scale; `v_scale` is V's. K and V are
    converted to q's dtype (float32 where the caller upcast q)."""
    k = tl.load(k_ptrs, mask=load_mask, other=0.0).to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * score_scale
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    v = tl.load(v_ptrs, mask=load_mask, other=0.0).to(q.dtype)
    pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    acc = acc * alpha[:, None] + pv * v_scale
    l_i = l_i * alpha + tl.sum(p, 1)
    return m_new, l_i, acc


@triton.jit
def _extend_kernel(
    Q,
    K_ext,
    V_ext,
    Out,
    K_buf,
    V_buf,
    qo_indptr,
    kv_indptr,
    kv_indices,
    sm_scale,
    k_scale,
    v_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_kbs,
    stride_kbh,
    stride_vbs,
    stride_vbh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    req = tl.program_id(0)
    head = tl.program_id(1)
    block_m = tl.program_id(2)
    kv_head = (head // GROUP).to(tl.int64)  # times a head's stride in the pool: past 2^31
    q_start = tl.load(qo_indptr + req)
    q_len = tl.load(qo_indptr + req + 1) - q_start
    kv_start = tl.load(kv_indptr + req)
    prefix = tl.load(kv_indptr + req + 1) - kv_start

    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < HEAD_DIM
    q = tl.load(
        Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
        mask=mask_m[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # the cached prefix, read through the slot indices
    for start_n in range(0, prefix, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < prefix
        slots = tl.load(kv_indices + kv_start + offs_n, mask=mask_n, other=0)
        m_i, l_i, acc = _online_softmax_block(
            q,
            K_buf + slots[:, None] * stride_kbs + kv_head * stride_kbh + offs_d[None, :],
            V_buf + slots[:, None] * stride_vbs + kv_head * stride_vbh + offs_d[None, :],
            mask_n[:, None] & mask_d[None, :],
            mask_n[None, :],
            sm_scale * k_scale,
            v_scale,
            m_i,
            l_i,
            acc,
            DOT_PRECISION,
        )

    # the new tokens themselves, causally
    end_n = tl.minimum((block_m + 1) * BLOCK_M, q_len) if CAUSAL else q_len
    for start_n in range(0, end_n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < q_len
        keep = mask_n[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        rows = q_start + offs_n
        m_i, l_i, acc = _online_softmax_block(
            q,
            K_ext + rows[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :],
            V_ext + rows[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
            mask_n[:, None] & mask_d[None, :],
            keep,
            sm_scale,
            1.0,
            m_i,
            l_i,
            acc,
            DOT_PRECISION,
        )

    out = acc / l_i[:, None]
    tl.store(
        Out + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
        out.to(Out.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )


def extend_attention_fwd(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    sm_scale=None,
    causal=True,
    max_extend_len=None,
    k_scale=1.0,
    v_scale=1.0,
):
    """o_extend[rows of request i] = attention of those rows over the request's cached slots
    kv_indices[kv_indptr[i]:kv_indptr[i+1]] and, causally, over its own new tokens. The cached
    K/V are read as stored * k_scale / v_scale; the new tokens' k/v as they are."""
    num_reqs = qo_indptr.numel() - 1
    heads, head_dim = q_extend.shape[1], q_extend.shape[2]
    group = heads // k_extend.shape[1]
    if max_extend_len is None:
        max_extend_len = int((qo_indptr[1:] - qo_indptr[:-1]).max()) if num_reqs else 0
    if num_reqs == 0 or max_extend_len == 0:
        return
    upcast = _upcast(q_extend)
    block_m, block_n, launch = _extend_blocks(q_extend, head_dim)
    grid = (num_reqs, heads, triton.cdiv(max_extend_len, block_m))
    _extend_kernel[grid](
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        sm_scale if sm_scale is not None else head_dim**-0.5,
        float(k_scale),
        float(v_scale),
        q_extend.stride(0),
        q_extend.stride(1),
        k_extend.stride(0),
        k_extend.stride(1),
        v_extend.stride(0),
        v_extend.stride(1),
        o_extend.stride(0),
        o_extend.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CAUSAL=causal,
        UPCAST=upcast,
        DOT_PRECISION=_dot_precision(torch.float32 if upcast else q_extend.dtype),
        **launch,
    )


def _extend_blocks(q: torch.Tensor, head_dim: int) -> tuple[int, int, dict]:
    """BLOCK_M, BLOCK_N and launch options of the extend kernel. On CUDA: 128 x 128 blocks and
    8 warps for 16-bit inputs up to head_dim 128, 64 x 32 and 4 warps for float32 inputs and
    larger heads; 32 x 32 in the interpreter. On an H200 (benchmarks/gpu_check.py --extra
    sweep: bf16, 8 x 512 new tokens over 1,024 cached, 32 heads, 8 KV heads, dim 128),
    128 x 128 with 8 warps and 2 stages ran at 171 TFLOP/s, against 145-160 for 128 x 64 with
    2-3 stages, 158 for 64 x 64, 93-125 for the rest."""
    if not q.is_cuda:
        return 32, 32, {}
    if q.element_size() == 2 and head_dim <= 128:
        return 128, 128, {"num_warps": 8, "num_stages": 2}
    return 64, 32, {"num_warps": 4, "num_stages": 2}


def _upcast(q: torch.Tensor) -> bool:
    """Whether the kernels compute on float32 copies of their loads: only for bf16 in Triton's
    interpreter (off CUDA), whose bf16 arithmetic is wrong. Elsewhere matrix products take
    their inputs as they are (bf16 or fp16 tensor-core products with float32 sums; fp8 K/V
    are converted to q's dtype first)."""
    return q.dtype == torch.bfloat16 and not q.is_cuda


def _dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision: full float32 ("ieee") for float32 inputs, which TF32 (the GPU
    default) would round to 10 mantissa bits; TF32 for 16-bit inputs, whose values it holds
    exactly and whose outputs keep no more bits than it."""
    return "ieee" if dtype == torch.float32 else "tf32"


@triton.jit
def _decode_split_kernel(
    Q,
    K_buf,
    V_buf,
    kv_indptr,
    kv_indices,
    Partial,
    score_scale,
    v_scale,
    stride_qb,
    stride_qh,
    stride_kbs,
    stride_kbh,
    stride_vbs,
    stride_vbh,
    stride_pb,
    stride_ph,
    stride_ps,
    GROUP: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One split of one request's KV for all GROUP query heads that share a KV head: each K/V
    block is read once for the group, and the scores are one matrix product."""
    req = tl.program_id(0)
    kv_head = tl.program_id(1).to(tl.int64)  # times a head's stride in the pool: past 2^31
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr + req)
    length = tl.load(kv_indptr + req + 1) - kv_start
    per_split = tl.cdiv(length, NUM_SPLITS)
    lo = split * per_split
    hi = tl.minimum(lo + per_split, length)

    offs_h = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    mask_h = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(
        Q + req * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=mask_h[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        slots = tl.load(kv_indices + kv_start + offs_n, mask=mask_n, other=0).to(tl.int64)
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            K_buf + slots[:, None] * stride_kbs + kv_head * stride_kbh + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        ).to(q.dtype)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * score_scale
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(
            V_buf + slots[:, None] * stride_vbs + kv_head * stride_vbh + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        ).to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    base = Partial + req * stride_pb + heads * stride_ph + split * stride_ps
    if hi > lo:
        out = acc / l_i[:, None] * v_scale
        tl.store(base[:, None] + offs_d[None, :], out, mask=mask_h[:, None] & mask_d[None, :])
        tl.store(base + HEAD_DIM, m_i + tl.log(l_i), mask=mask_h)  # this split's log-sum-exp
    else:
        tl.store(base + HEAD_DIM, tl.full([BLOCK_H], float("-inf"), tl.float32), mask=mask_h)


@triton.jit
def _decode_reduce_kernel(
    Partial,
    Out,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    req = tl.program_id(0)
    head = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    m_total = float("-inf")
    weight = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for split in range(NUM_SPLITS):
        base = Partial + req * stride_pb + head * stride_ph + split * stride_ps
        lse = tl.load(base + HEAD_DIM)
        if lse > float("-inf"):
            part = tl.load(base + offs_d, mask=mask_d, other=0.0)
            m_new = tl.maximum(m_total, lse)
            scale_old = tl.exp(m_total - m_new)
            scale_new = tl.exp(lse - m_new)
            acc = acc * scale_old + part * scale_new
            weight = weight * scale_old + scale_new
            m_total = m_new
    tl.store(
        Out + req * stride_ob + head * stride_oh + offs_d,
        (acc / weight).to(Out.dtype.element_ty),
        mask=mask_d,
    )


def decode_attention_fwd(
    q,
    k_buffer,
    v_buffer,
    o,
    kv_indptr,
    kv_indices,
    num_kv_splits,
    sm_scale=None,
    k_scale=1.0,
    v_scale=1.0,
):
    """Flash-decoding: each request's KV is split into num_kv_splits ranges processed in parallel,
    then merged with a log-sum-exp reduction. q, o: [batch, heads, head_dim]; the pool's K/V are
    read as stored * k_scale / v_scale."""
    batch, heads, head_dim = q.shape
    if batch == 0:
        return
    group = heads // k_buffer.shape[1]
    splits = max(int(num_kv_splits), 1)
    partial = torch.empty(
        (batch, heads, splits, head_dim + 1), dtype=torch.float32, device=q.device
    )
    block_d = triton.next_power_of_2(head_dim)
    upcast = _upcast(q)
    _decode_split_kernel[(batch, heads // group, splits)](
        q,
        k_buffer,
        v_buffer,
        kv_indptr,
        kv_indices,
        partial,
        (sm_scale if sm_scale is not None else head_dim**-0.5) * float(k_scale),
        float(v_scale),
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        GROUP=group,
        BLOCK_H=max(16, triton.next_power_of_2(group)),  # tl.dot takes 16 rows or more
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_N=64 if q.is_cuda else 32,
        NUM_SPLITS=splits,
        UPCAST=upcast,
        DOT_PRECISION=_dot_precision(torch.float32 if upcast else q.dtype),
        **({"num_warps": 4, "num_stages": 2} if q.is_cuda else {}),
    )
    _decode_reduce_kernel[(batch, heads)](
        partial,
        o,
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        o.stride(0),
        o.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        NUM_SPLITS=splits,
    )


@triton.jit
def _bitmask_kernel(Logits, Bitmask, Rows, vocab, stride_l, stride_b, BLOCK: tl.constexpr):
    row = tl.load(Rows + tl.program_id(0))
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_vocab = offs < vocab
    words = tl.load(Bitmask + row * stride_b + offs // 32, mask=in_vocab, other=0)
    allowed = ((words >> (offs % 32)) & 1) != 0
    tl.store(Logits + row * stride_l + offs, float("-inf"), mask=in_vocab & ~allowed)


def apply_token_bitmask_inplace(logits, bitmask, indices=None):
    """Set logits[r, t] = -inf where bit t of bitmask[r] is 0, for every row or the rows in indices."""
    if logits.dim() == 1:
        logits, bitmask = logits[None], bitmask.reshape(1, -1)
    rows = (
        torch.arange(logits.shape[0], device=logits.device)
        if indices is None
        else torch.as_tensor(indices, device=logits.device)
    ).to(torch.int32)
    if rows.numel() == 0:
        return
    vocab = logits.shape[-1]
    block = 1024
    _bitmask_kernel[(rows.numel(), triton.cdiv(vocab, block))](
        logits, bitmask, rows, vocab, logits.stride(0), bitmask.stride(0), BLOCK=block
    )


@triton.jit
def _kv_indices_kernel(ReqToToken, Rows, Lens, Indptr, Out, stride_row, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    row = tl.load(Rows + i).to(tl.int64)
    length = tl.load(Lens + i)
    start = tl.load(Indptr + i)
    for first in range(0, length, BLOCK):
        offs = first + tl.arange(0, BLOCK)
        keep = offs < length
        slots = tl.load(ReqToToken + row * stride_row + offs, mask=keep)
        tl.store(Out + start + offs, slots, mask=keep)


def fill_kv_indices(req_to_token, rows, lens, kv_indptr, kv_indices):
    """kv_indices[kv_indptr[i] : kv_indptr[i] + lens[i]] = req_to_token[rows[i], :lens[i]] for
    each request i, in one launch whose shape depends only on the batch size (so a CUDA graph
    can hold it)."""
    batch = rows.numel()
    if batch:
        _kv_indices_kernel[(batch,)](
            req_to_token, rows, lens, kv_indptr, kv_indices, req_to_token.stride(0), BLOCK=256
        )
