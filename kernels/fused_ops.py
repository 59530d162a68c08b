"""Triton kernels for the elementwise steps of a decoder layer on a GPU, one launch each where
torch needs several: RMSNorm (with the residual add before it), rotary embedding in place on
the fused qkv rows, and SiLU(gate) * up. A decode step of a small model is a few hundred such
launches; in a CUDA graph each still costs the GPU a few microseconds, more than its work.

Arithmetic is float32 between the loads and the stores (so the interpreter, whose bfloat16
arithmetic is unreliable, gives the GPU's results); each result is rounded to the output
dtype once. Where the torch modules round an intermediate to the model's dtype (the
normalised row before the weight, the residual sum), the kernels round it too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    X,
    Residual,
    Weight,
    Out,
    stride_x,
    stride_r,
    stride_o,
    n_cols,
    eps,
    ADD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=keep, other=0.0).to(tl.float32)
    if ADD:  # residual += x, rounded as the residual stream is kept, then normalised
        r = tl.load(Residual + row * stride_r + cols, mask=keep, other=0.0).to(tl.float32)
        total = (x + r).to(Residual.dtype.element_ty)
        tl.store(Residual + row * stride_r + cols, total, mask=keep)
        x = total.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(Out.dtype.element_ty).to(tl.float32)
    w = tl.load(Weight + cols, mask=keep, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_o + cols, (normed * w).to(Out.dtype.element_ty), mask=keep)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm of the rows of x ([T, D]) scaled by weight, in x's dtype. With `residual`
    ([T, D], updated in place): residual += x first, and the sum is what is normalised."""
    rows, cols = x.shape
    out = torch.empty_like(x)
    if rows == 0:
        return out
    block = triton.next_power_of_2(cols)
    res = residual if residual is not None else x
    _rms_norm_kernel[(rows,)](
        x,
        res,
        weight,
        out,
        x.stride(0),
        res.stride(0),
        out.stride(0),
        cols,
        eps,
        ADD=residual is not None,
        BLOCK=block,
        **({"num_warps": min(16, max(4, block // 512))} if x.is_cuda else {}),
    )
    return out


@triton.jit
def _rotary_kernel(
    QKV,
    Positions,
    Cos,
    Sin,
    stride_t,
    stride_pos,
    HEAD_DIM: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    half = HEAD_DIM // 2
    offs = tl.arange(0, HALF_BLOCK)
    keep = offs < half
    pos = tl.load(Positions + token).to(tl.int64)
    cos = tl.load(Cos + pos * stride_pos + offs, mask=keep, other=0.0).to(tl.float32)
    sin = tl.load(Sin + pos * stride_pos + offs, mask=keep, other=0.0).to(tl.float32)
    base = QKV + token * stride_t + head * HEAD_DIM
    x1 = tl.load(base + offs, mask=keep, other=0.0).to(tl.float32)
    x2 = tl.load(base + half + offs, mask=keep, other=0.0).to(tl.float32)
    tl.store(base + offs, (x1 * cos - x2 * sin).to(QKV.dtype.element_ty), mask=keep)
    tl.store(base + half + offs, (x2 * cos + x1 * sin).to(QKV.dtype.element_ty), mask=keep)


def rotary_qkv_inplace(
    qkv: torch.Tensor,
    rotated_heads: int,
    head_dim: int,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> None:
    """Rotate, in place, the first `rotated_heads` heads of each row of qkv ([T, heads *
    head_dim], the q then k heads of a fused projection) by its position: the half-split
    layout, cos and sin tables [positions, head_dim] whose two halves are equal."""
    tokens = qkv.shape[0]
    if tokens == 0:
        return
    _rotary_kernel[(tokens, rotated_heads)](
        qkv,
        positions,
        cos,
        sin,
        qkv.stride(0),
        cos.stride(0),
        HEAD_DIM=head_dim,
        HALF_BLOCK=triton.next_power_of_2(head_dim // 2),
    )


@triton.jit
def _silu_mul_kernel(GateUp, Out, stride_g, stride_o, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    keep = cols < inter
    gate = tl.load(GateUp + row * stride_g + cols, mask=keep, other=0.0).to(tl.float32)
    up = tl.load(GateUp + row * stride_g + inter + cols, mask=keep, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(Out.dtype.element_ty).to(tl.float32)
    tl.store(Out + row * stride_o + cols, (act * up).to(Out.dtype.element_ty), mask=keep)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up for gate_up = [gate | up] ([T, 2 * I]): [T, I] in its dtype."""
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((rows, inter), dtype=gate_up.dtype, device=gate_up.device)
    if rows == 0:
        return out
    block = 1024
    _silu_mul_kernel[(rows, triton.cdiv(inter, block))](
        gate_up, out, gate_up.stride(0), out.stride(0), inter, BLOCK=block
    )
    return out
