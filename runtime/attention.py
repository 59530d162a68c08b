"""Attention over the token-index KV pool, behind one backend interface.

A forward holds a ragged batch: request i contributes `extend_lens[i]` new tokens that attend
to its `seq_lens[i] - extend_lens[i]` cached tokens and causally to each other. A request with
one new token is a decode; the rest are extends (prefill or a prefill chunk).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from runtime.memory_pool import ReqToTokenPool, TokenToKVPool


@dataclass
class ForwardBatch:
    """Everything one model forward needs, flattened over requests without padding."""

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    out_cache_loc: torch.Tensor  # [T] KV slots the new tokens are written to
    req_pool_indices: list[int]
    extend_lens: list[int]
    seq_lens: list[int]  # tokens with KV after this forward, per request
    logit_rows: torch.Tensor  # rows of the hidden states whose logits are needed
    metadata: object = field(default=None)  # set by the attention backend

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


class AttentionBackend(ABC):
    """Stores the new K/V of each layer into the pool and attends over each request's slots."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool):
        self.req_to_token_pool = req_to_token_pool
        self.kv_pool = kv_pool

    @abstractmethod
    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        """Precompute per-forward index tensors once, shared by every layer."""

    @abstractmethod
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, batch: ForwardBatch
    ) -> torch.Tensor:
        """q: [T, heads, d]; k, v: [T, kv_heads, d]; returns [T, heads * d]."""


@dataclass
class _TorchMetadata:
    decode_rows: torch.Tensor | None  # rows of q that are decodes
    decode_slots: torch.Tensor | None  # [B, Lmax] KV slots, padded with slot 0
    decode_mask: torch.Tensor | None  # [KVH * B, 1, Lmax] True where padding; None if none
    extends: list[tuple[int, int, torch.Tensor, torch.Tensor | None]]  # q start, end, slots, mask


class TorchAttentionBackend(AttentionBackend):
    """Reference backend on torch's scaled_dot_product_attention; the CPU default."""

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        table = self.req_to_token_pool.req_to_token
        decode_rows, decode_reqs, extends = [], [], []
        start = 0
        for i, (row, ext, seq) in enumerate(
            zip(batch.req_pool_indices, batch.extend_lens, batch.seq_lens)
        ):
            if ext == 1:
                decode_rows.append(start)
                decode_reqs.append(i)
            else:
                slots = table[row, :seq].long()
                prefix = seq - ext
                mask = None
                if prefix > 0:
                    kv_pos = torch.arange(seq)
                    mask = kv_pos[None, :] <= (prefix + torch.arange(ext))[:, None]
                extends.append((start, start + ext, slots, mask))
            start += ext
        meta = _TorchMetadata(None, None, None, extends)
        if decode_reqs:
            lens = torch.tensor([batch.seq_lens[i] for i in decode_reqs])
            lmax = int(lens.max())
            rows = torch.tensor([batch.req_pool_indices[i] for i in decode_reqs])
            valid = torch.arange(lmax)[None, :] < lens[:, None]
            meta.decode_rows = torch.tensor(decode_rows)
            meta.decode_slots = table[rows, :lmax].long() * valid
            if not bool(valid.all()):
                kv_heads = self.kv_pool.k_heads[0].shape[0]
                meta.decode_mask = (~valid).repeat(kv_heads, 1)[:, None, :]  # [KVH*B, 1, L]
        batch.metadata = meta

    def forward(self, q, k, v, layer, batch):
        self.kv_pool.set_kv(layer, batch.out_cache_loc, k, v)
        k_heads, v_heads = self.kv_pool.k_heads[layer], self.kv_pool.v_heads[layer]
        meta: _TorchMetadata = batch.metadata
        out = torch.empty_like(q)
        if meta.decode_rows is not None:
            out[meta.decode_rows] = self._decode(q[meta.decode_rows], k_heads, v_heads, meta)
        for start, end, slots, mask in meta.extends:
            qe = q[start:end].transpose(0, 1).unsqueeze(0)  # [1, H, L, d]
            ke = k_heads.index_select(1, slots).unsqueeze(0)  # [1, KVH, S, d]
            ve = v_heads.index_select(1, slots).unsqueeze(0)
            oe = F.scaled_dot_product_attention(
                qe, ke, ve, attn_mask=mask, is_causal=mask is None, enable_gqa=True
            )
            out[start:end] = oe.squeeze(0).transpose(0, 1)
        return out.reshape(q.shape[0], -1)

    @staticmethod
    def _decode(q, k_heads, v_heads, meta: _TorchMetadata) -> torch.Tensor:
        # Plain bmm over (kv head, request) pairs: torch's CPU flash kernel is slow for one query
        # per request, and gathering each head's slots row-wise keeps every block BLAS-ready.
        batch, heads, dim = q.shape
        kv_heads = k_heads.shape[0]
        group = heads // kv_heads
        length = meta.decode_slots.shape[1]
        flat = meta.decode_slots.reshape(-1)
        k = q.new_empty(kv_heads, batch * length, dim)
        v = q.new_empty(kv_heads, batch * length, dim)
        for h in range(kv_heads):
            torch.index_select(k_heads[h], 0, flat, out=k[h])
            torch.index_select(v_heads[h], 0, flat, out=v[h])
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


def create_attention_backend(
    name: str, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool
) -> AttentionBackend:
    if name == "torch":
        return TorchAttentionBackend(req_to_token_pool, kv_pool)
    if name == "triton":
        from runtime.triton_attention import TritonAttentionBackend  # imports triton lazily

        return TritonAttentionBackend(req_to_token_pool, kv_pool)
    raise ValueError(f"attention_backend must be 'torch' or 'triton', got {name!r}")
