"""The `torch` attention backend: scaled_dot_product_attention and batched decode on torch."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from runtime.model import qgemv
from runtime.model.attention.base import AttentionBackend, ForwardBatch
from runtime.transfer import to_device

# Where the native decode kernel runs (float32 queries on the CPU), extends of up to this many
# new tokens attend as that many one-query rows, not one scaled_dot_product_attention call
# each: 16 prompts of 4 tokens, SmolLM2, 30 layers, 2 threads: 30 -> ~1 ms of attention, and
# the whole step runs in one native call. Elsewhere the rows would go through the gather +
# bmm fallback, which copies the prefix once per row: there extends stay on SDPA.
SHORT_EXTEND = 16


@dataclass
class _TorchMetadata:
    decode_rows: torch.Tensor | None  # rows of q that are one-query rows, where not all are
    decode_slots: torch.Tensor | None  # [B, Lmax] KV slots of each query row, padded with 0
    decode_lens: torch.Tensor | None  # [B] tokens each query row attends to
    decode_mask: torch.Tensor | None  # [KVH * B, 1, Lmax] True where padding; None if none
    extends: list[tuple[int, int, torch.Tensor, torch.Tensor | None]]  # q start, end, slots, mask


class TorchAttentionBackend(AttentionBackend):
    """Reference backend on torch's scaled_dot_product_attention; the CPU default."""

    def __init__(self, req_to_token_pool, kv_pool, query_dtype: torch.dtype | None = None):
        """query_dtype: the model's activations (None: unknown, so no short extends as rows)."""
        super().__init__(req_to_token_pool, kv_pool)
        native = qgemv.decode_attention_runs(query_dtype, kv_pool.k_heads[0])
        self.query_rows = SHORT_EXTEND if native else 1  # extends this short: one row a token

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        table = self.req_to_token_pool.req_to_token
        device = table.device
        # one query row per decode token and per token of a short extend (its own length:
        # the tokens before it and itself, whose K/V each layer writes before attending)
        query_rows, query_reqs, query_lens, extends = [], [], [], []
        start = 0
        for row, ext, seq in zip(batch.req_pool_indices, batch.extend_lens, batch.seq_lens):
            if ext <= self.query_rows:
                query_rows.extend(range(start, start + ext))
                query_reqs.extend([row] * ext)
                query_lens.extend(range(seq - ext + 1, seq + 1))
            else:
                slots = table[row, :seq].long()
                prefix = seq - ext
                mask = None
                if prefix > 0:
                    kv_pos = torch.arange(seq, device=device)
                    mask = kv_pos[None, :] <= (prefix + torch.arange(ext, device=device))[:, None]
                extends.append((start, start + ext, slots, mask))
            start += ext
        meta = _TorchMetadata(None, None, None, None, extends)
        if query_rows:
            if max(batch.extend_lens) == 1:  # all decodes: on the device already
                rows, _, lens = batch.request_tensors(device)
            else:
                lens, rows, decode_rows = to_device(device, [query_lens, query_reqs, query_rows])
                if extends:  # the query rows' places in q (else all of q, in order)
                    meta.decode_rows = decode_rows
            lmax = max(query_lens)
            valid = torch.arange(lmax, device=device)[None, :] < lens[:, None]
            meta.decode_lens = lens
            meta.decode_slots = table[rows, :lmax].long() * valid
            if min(query_lens) < lmax:  # some rows are padded
                kv_heads = self.kv_pool.k_heads[0].shape[0]
                meta.decode_mask = (~valid).repeat(kv_heads, 1)[:, None, :]  # [KVH*B, 1, L]
        batch.metadata = meta

    def decode_slots(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
        meta: _TorchMetadata = batch.metadata
        if meta.extends or meta.decode_slots is None:
            return None
        return meta.decode_slots, meta.decode_lens

    def forward(self, q, k, v, layer, batch):
        k_heads, v_heads = self.kv_pool.k_heads[layer], self.kv_pool.v_heads[layer]
        loc = batch.out_cache_loc
        if not (qgemv.write_kv(k_heads, loc, k) and qgemv.write_kv(v_heads, loc, v)):
            self.kv_pool.set_kv(layer, loc, k, v)
        meta: _TorchMetadata = batch.metadata
        pool = self.kv_pool
        if not meta.extends:  # all decodes, in row order
            return self._decode(q, k_heads, v_heads, meta).reshape(q.shape[0], -1)
        out = torch.empty_like(q)
        if meta.decode_rows is not None:
            out[meta.decode_rows] = self._decode(q[meta.decode_rows], k_heads, v_heads, meta)
        for start, end, slots, mask in meta.extends:
            qe = q[start:end].transpose(0, 1).unsqueeze(0)  # [1, H, L, d]
            ke = pool.load(k_heads.index_select(1, slots), pool.k_scale, q.dtype)[None]
            ve = pool.load(v_heads.index_select(1, slots), pool.v_scale, q.dtype)[None]
            oe = F.scaled_dot_product_attention(
                qe, ke, ve, attn_mask=mask, is_causal=mask is None, enable_gqa=True
            )
            out[start:end] = oe.squeeze(0).transpose(0, 1)
        return out.reshape(q.shape[0], -1)

    def _decode(self, q, k_heads, v_heads, meta: _TorchMetadata) -> torch.Tensor:
        # Plain bmm over (kv head, request) pairs: torch's CPU flash kernel is slow for one query
        # per request; one gather per tensor over the head-major pool gives BLAS-ready blocks.
        native = qgemv.decode_attention(q, k_heads, v_heads, meta.decode_slots, meta.decode_lens)
        if native is not None:  # one call, K/V read in place (float32 on a CPU)
            return native
        batch, heads, dim = q.shape
        kv_heads = k_heads.shape[0]
        group = heads // kv_heads
        length = meta.decode_slots.shape[1]
        flat = meta.decode_slots.reshape(-1)
        pool = self.kv_pool
        k = pool.load(k_heads.index_select(1, flat), pool.k_scale, q.dtype)
        v = pool.load(v_heads.index_select(1, flat), pool.v_scale, q.dtype)
        k = k.view(kv_heads * batch, length, dim)
        v = v.view(kv_heads * batch, length, dim)
        qg = (
            q.view(batch, kv_heads, group, dim)
            .transpose(0, 1)
            .reshape(kv_heads * batch, group, dim)
        )
        scores = torch.bmm(qg, k.transpose(1, 2)).float() * dim**-0.5
        if meta.decode_mask is not None:
            scores.masked_fill_(meta.decode_mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(v.dtype)
        out = torch.bmm(probs, v).view(kv_heads, batch, group, dim)
        return out.transpose(0, 1).reshape(batch, heads, dim)
