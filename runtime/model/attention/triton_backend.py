"""The `triton` attention backend: the kernels in `kernels/` over the token-index KV pool."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.triton_ops import decode_attention_fwd, extend_attention_fwd, fill_kv_indices
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
        decode_only = all(n == 1 for n in batch.extend_lens)
        # decode reads the new token from the pool too; extend reads it from k/v directly
        cached = sum(batch.seq_lens) - (0 if decode_only else sum(batch.extend_lens))
        kv_indices = torch.empty(cached, dtype=torch.int32, device=batch.input_ids.device)
        self._set_metadata(batch, decode_only, kv_indices, max(batch.extend_lens, default=0))

    def init_decode_graph_metadata(self, batch: ForwardBatch, kv_indices: torch.Tensor) -> None:
        """Metadata of a decode-only batch built on the device alone, into `kv_indices` (a
        buffer large enough for any batch): no host value of this step is read, so a CUDA graph
        can hold it and replay it for new lengths."""
        self._set_metadata(batch, True, kv_indices, 1)

    def _set_metadata(
        self, batch: ForwardBatch, decode_only: bool, kv_indices: torch.Tensor, max_extend: int
    ) -> None:
        table = self.req_to_token_pool.req_to_token
        rows, extend_lens, seq_lens = batch.request_tensors(table.device)
        kv_lens = seq_lens if decode_only else seq_lens - extend_lens
        kv_indptr = _indptr(kv_lens)
        fill_kv_indices(table, rows, kv_lens, kv_indptr, kv_indices)
        batch.metadata = _TritonMetadata(
            decode_only=decode_only,
            qo_indptr=_indptr(extend_lens),
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            max_extend_len=max_extend,
        )

    def forward(self, q, k, v, layer, batch):
        self.kv_pool.set_kv(layer, batch.out_cache_loc, k, v)
        meta: _TritonMetadata = batch.metadata
        pool = self.kv_pool
        k_buf, v_buf = pool.k_buffers[layer], pool.v_buffers[layer]
        scales = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
        out = torch.empty_like(q)
        if meta.decode_only:
            decode_attention_fwd(
                q,
                k_buf,
                v_buf,
                out,
                meta.kv_indptr,
                meta.kv_indices,
                DEFAULT_KV_SPLITS,
                **scales,
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
                **scales,
            )
        return out.reshape(q.shape[0], -1)


def _indptr(lengths: torch.Tensor) -> torch.Tensor:
    """[0, l0, l0 + l1, ...] int32: where each request's rows start, and the end."""
    return F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
