"""Picks an attention backend by name."""

from __future__ import annotations

import torch

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
from runtime.model.attention.base import AttentionBackend
from runtime.model.attention.torch_backend import TorchAttentionBackend


def create_attention_backend(
    name: str,
    req_to_token_pool: ReqToTokenPool,
    kv_pool: TokenToKVPool,
    query_dtype: torch.dtype | None = None,
) -> AttentionBackend:
    """query_dtype: the model's activation dtype (the torch backend picks its paths by it)."""
    if name == "torch":
        return TorchAttentionBackend(req_to_token_pool, kv_pool, query_dtype)
    if name == "triton":
        # imported on demand: it loads triton
        from runtime.model.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend(req_to_token_pool, kv_pool)
    raise ValueError(f"attention_backend must be 'torch' or 'triton', got {name!r}")
