"""The `triton` attention backend: the kernels in `kernels/` over the token-index KV pool."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.triton_ops import decode_attention_fwd, extend_attention_fwd
from runtime.model.attention.base import AttentionBackend, ForwardBatch

DEFAULT_KV_SPLITS = 8


@dataclass
class _TritonMetadata:
    decode_only: bool
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    max_extend_len: int


class TritonAttentionBackend(AttentionBackend):
    """Decode-only steps use split-K flash-decoding; any step with an extend uses the extend
    kernel for every request (a decode is an extend of one token)."""

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        table = self.req_to_token_pool.req_to_token
        device = table.device
        decode_only = all(n == 1 for n in batch.extend_lens)
        # decode reads the new token from the pool too; extend reads it from k/v directly
        kv_lens = (
            batch.seq_lens
            if decode_only
            else [s - e for s, e in zip(batch.seq_lens, batch.extend_lens)]
        )
        kv_indices = torch.cat(
            [table[row, :n] for row, n in zip(batch.req_pool_indices, kv_lens)]
            or [torch.empty(0, dtype=torch.int32, device=device)]
        )
        _, extend_lens, seq_lens = batch.request_tensors(device)
        batch.metadata = _TritonMetadata(
            decode_only=decode_only,
            qo_indptr=_indptr(extend_lens),
            kv_indptr=_indptr(seq_lens if decode_only else seq_lens - extend_lens),
            kv_indices=kv_indices.to(torch.int32),
            max_extend_len=max(batch.extend_lens, default=0),
        )

    def forward(self, q, k, v, layer, batch):
        self.kv_pool.set_kv(layer, batch.out_cache_loc, k, v)
        meta: _TritonMetadata = batch.metadata
        k_buf, v_buf = self.kv_pool.k_buffers[layer], self.kv_pool.v_buffers[layer]
        out = torch.empty_like(q)
        if meta.decode_only:
            decode_attention_fwd(
                q, k_buf, v_buf, out, meta.kv_indptr, meta.kv_indices, DEFAULT_KV_SPLITS
            )
        else:
            extend_attention_fwd(
                q,
                k,
                v,
                out,
                k_buf,
                v_buf,
                meta.qo_indptr,
                meta.kv_indptr,
                meta.kv_indices,
                max_extend_len=meta.max_extend_len,
            )
        return out.reshape(q.shape[0], -1)


def _indptr(lengths: torch.Tensor) -> torch.Tensor:
    """[0, l0, l0 + l1, ...] int32: where each request's rows start, and the end."""
    return F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
