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
from runtime.transfer import to_device


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
    # [3, B] on the device: req_pool_indices, extend_lens and seq_lens (see request_tensors)
    request_lens: torch.Tensor | None = None
    # a decode batch sent in one copy: [6, B] over that copy's buffer, whose rows are
    # input_ids, positions, logit_rows, req_pool_indices, extend_lens, seq_lens (a CUDA
    # graph's inputs then take one copy on the device); None otherwise
    packed: torch.Tensor | None = None

    @classmethod
    def from_host(
        cls,
        device: torch.device | str,
        input_ids: list[int],
        positions: list[int],
        out_cache_loc: torch.Tensor,
        logit_rows: list[int],
        requests: list[tuple[int, int, int]],
    ) -> ForwardBatch:
        """A batch on `device` from lists built on the host, sent in one copy; `requests` holds
        each request's (req_pool_index, extend_len, seq_len); `out_cache_loc` comes from the KV
        pool, on the device already."""
        rows = [r[0] for r in requests]
        extend_lens = [r[1] for r in requests]
        seq_lens = [r[2] for r in requests]
        ids_t, positions_t, logit_rows_t, per_request = to_device(
            device, [input_ids, positions, logit_rows, rows + extend_lens + seq_lens]
        )
        n, packed = len(requests), None
        if len(input_ids) == len(logit_rows) == n and ids_t.device.type != "cpu":
            packed = ids_t.as_strided((6, n), (n, 1))  # to_device's one buffer, in order
        return cls(
            input_ids=ids_t,
            positions=positions_t,
            out_cache_loc=out_cache_loc,
            req_pool_indices=rows,
            extend_lens=extend_lens,
            seq_lens=seq_lens,
            logit_rows=logit_rows_t,
            request_lens=per_request.view(3, -1),
            packed=packed,
        )

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    def request_tensors(self, device: torch.device | str) -> torch.Tensor:
        """req_pool_indices, extend_lens and seq_lens as the rows of one [3, B] int64 tensor on
        `device`; whoever builds the batch can send it with the token arrays, else it is copied
        here on first use."""
        if self.request_lens is None:
            (flat,) = to_device(device, [self.req_pool_indices + self.extend_lens + self.seq_lens])
            self.request_lens = flat.view(3, -1)
        return self.request_lens

    def token_rows(self) -> torch.Tensor:
        """The req_to_token row of each new token, on the device."""
        rows, extend_lens, _ = self.request_tensors(self.input_ids.device)
        if self.num_tokens == len(self.extend_lens) and max(self.extend_lens, default=1) == 1:
            # one token each: no op to launch
            return rows
        return torch.repeat_interleave(rows, extend_lens, output_size=self.num_tokens)


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
        """For a batch whose every new token attends as one query row (decodes; the torch
        backend's short extends too): each token's KV slots [T, Lmax] (padded, its own last)
        and their counts [T], as a whole-step native kernel reads them; None for other batches
        or where this backend keeps no such tables."""
        return None
