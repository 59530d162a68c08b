"""Attention over the token-index KV pool, behind one backend interface.

A forward holds a ragged batch: request i contributes `extend_lens[i]` new tokens that attend
to its `seq_lens[i] - extend_lens[i]` cached tokens and causally to each other. A request with
one new token is a decode; the rest are extends (prefill or a prefill chunk).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool


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

    def decode_slots(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For a batch of decodes only: each request's KV slots [B, Lmax] (padded) and their
        counts [B], as a whole-step native kernel reads them; None for other batches or where
        this backend keeps no such tables."""
        return None
