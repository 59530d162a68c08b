"""Where a finished request's KV goes: into a prefix cache, or straight back to the pool."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
from runtime.scheduler.req import Req


class PrefixCache(ABC):
    """Shared-prefix KV store consulted at admission and fed when requests finish."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool):
        self.req_to_token_pool = req_to_token_pool
        self.kv_pool = kv_pool

    @abstractmethod
    def match_prefix(self, tokens: list[int]) -> tuple[torch.Tensor, object]:
        """KV slots of the longest cached prefix of `tokens`, and a handle to lock it by."""

    @abstractmethod
    def lock(self, node: object) -> None: ...

    @abstractmethod
    def unlock(self, node: object) -> None: ...

    @abstractmethod
    def cache_finished_req(self, req: Req) -> None:
        """Take over (or free) the KV of a request that is leaving the batch."""

    @abstractmethod
    def cache_unfinished_req(self, req: Req) -> None:
        """Share the KV computed so far by a request that keeps running."""

    @abstractmethod
    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` unused slots if possible; returns how many were freed."""

    @abstractmethod
    def evictable_size(self) -> int: ...

    @abstractmethod
    def protected_size(self) -> int: ...

    @abstractmethod
    def total_size(self) -> int: ...

    @abstractmethod
    def reset(self) -> None: ...

    def no_slots(self) -> torch.Tensor:
        """An empty list of KV slots, on the pool's device like every other."""
        return torch.empty(0, dtype=torch.int64, device=self.kv_pool.device)

    def req_slots(self, req: Req) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv_len].long()


class NoPrefixCache(PrefixCache):
    """Caching disabled: a request's KV returns to the pool when it finishes."""

    def match_prefix(self, tokens):
        return self.no_slots(), None

    def lock(self, node):
        pass

    def unlock(self, node):
        pass

    def cache_finished_req(self, req):
        self.kv_pool.free(self.req_slots(req))

    def cache_unfinished_req(self, req):
        pass

    def evict(self, num_tokens):
        return 0

    def evictable_size(self):
        return 0

    def protected_size(self):
        return 0

    def total_size(self):
        return 0

    def reset(self):
        pass
