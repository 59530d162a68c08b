"""Torch reference implementations of the Triton kernels (same arguments, same results)."""

from __future__ import annotations

import torch


def _attend(q, k, v, sm_scale, mask=None):
    """q: [L, H, D]; k, v: [S, KVH, D]; mask: [L, S] bool or None. fp32 math."""
    heads, kv_heads = q.shape[1], k.shape[1]
    k = k.float().repeat_interleave(heads // kv_heads, dim=1)
    v = v.float().repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("lhd,shd->hls", q.float(), k) * sm_scale
    if mask is not None:
        scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hls,shd->lhd", torch.softmax(scores, dim=-1), v)


def extend_attention_ref(
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
    k_scale=1.0,
    v_scale=1.0,
):
    """Each request's new tokens attend to its cached prefix and (causally) to each other; the
    cached K/V are read as stored * k_scale / v_scale."""
    sm_scale = sm_scale if sm_scale is not None else q_extend.shape[-1] ** -0.5
    for i in range(qo_indptr.numel() - 1):
        q0, q1 = int(qo_indptr[i]), int(qo_indptr[i + 1])
        slots = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
        prefix = slots.numel()
        k = torch.cat([k_buffer[slots].float() * k_scale, k_extend[q0:q1].float()])
        v = torch.cat([v_buffer[slots].float() * v_scale, v_extend[q0:q1].float()])
        mask = None
        if causal:
            length = q1 - q0
            mask = torch.arange(prefix + length, device=q_extend.device)[None, :] <= (
                prefix + torch.arange(length, device=q_extend.device)[:, None]
            )
        o_extend[q0:q1] = _attend(q_extend[q0:q1], k, v, sm_scale, mask).to(o_extend.dtype)


def decode_attention_ref(
    q,
    k_buffer,
    v_buffer,
    o,
    kv_indptr,
    kv_indices,
    num_kv_splits=None,
    sm_scale=None,
    k_scale=1.0,
    v_scale=1.0,
):
    """One query per request over its KV slots (read as stored * k_scale / v_scale)."""
    sm_scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
    for i in range(q.shape[0]):
        slots = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
        k, v = k_buffer[slots].float() * k_scale, v_buffer[slots].float() * v_scale
        o[i] = _attend(q[i : i + 1], k, v, sm_scale)[0].to(o.dtype)


def apply_token_bitmask_inplace_ref(logits, bitmask, indices=None):
    """Set logits to -inf where the token's bit in the int32 bitmask is 0."""
    vocab = logits.shape[-1]
    bits = (bitmask.to(torch.int64)[..., :, None] >> torch.arange(32, device=bitmask.device)) & 1
    allowed = bits.reshape(*bitmask.shape[:-1], -1)[..., :vocab].bool()
    if indices is None:
        logits.masked_fill_(~allowed, float("-inf"))
        return
    rows = torch.as_tensor(indices, dtype=torch.int64, device=logits.device)
    logits[rows] = logits[rows].masked_fill(~allowed[rows], float("-inf"))


def fill_kv_indices_ref(req_to_token, rows, lens, kv_indptr, kv_indices):
    """Each request's slots, read from its req_to_token row, laid end to end."""
    for i in range(rows.numel()):
        start, n = int(kv_indptr[i]), int(lens[i])
        kv_indices[start : start + n] = req_to_token[int(rows[i]), :n]


def rms_norm_ref(x, weight, eps, residual=None):
    """fused_ops.rms_norm in torch (float32 math, the same roundings)."""
    if residual is not None:
        residual.copy_((residual.float() + x.float()).to(residual.dtype))
        x = residual
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (normed.float() * weight.float()).to(x.dtype)


def rotary_qkv_inplace_ref(qkv, rotated_heads, head_dim, positions, cos, sin):
    """fused_ops.rotary_qkv_inplace in torch."""
    half = head_dim // 2
    heads = qkv[:, : rotated_heads * head_dim].view(qkv.shape[0], rotated_heads, head_dim)
    x1, x2 = heads[..., :half].float(), heads[..., half:].float()
    c = cos[positions.long(), :half].float()[:, None]
    s = sin[positions.long(), :half].float()[:, None]
    out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    heads.copy_(out.to(qkv.dtype))


def silu_mul_ref(gate_up):
    """fused_ops.silu_mul in torch."""
    gate, up = gate_up.float().chunk(2, dim=-1)
    act = torch.nn.functional.silu(gate).to(gate_up.dtype).float()
    return (act * up).to(gate_up.dtype)
