"""Radix tree over token ids whose values are KV slot indices (page size 1).

Every KV slot is exactly one of: free in the pool, owned by a running request, or held by the
tree. Requests lock the path to the node they matched, so its slots cannot be evicted while
they run; eviction frees the least recently used unlocked leaves first.
"""

from __future__ import annotations

import heapq
import itertools

import torch

from runtime.cache.prefix_cache import PrefixCache
from runtime.scheduler.req import Req

_clock = itertools.count()


class TreeNode:
    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access")

    def __init__(self, key: list[int], value: torch.Tensor, parent: TreeNode | None):
        self.children: dict[int, TreeNode] = {}
        self.parent = parent
        self.key = key  # token ids of the edge into this node
        self.value = value  # their KV slots, int64
        self.lock_ref = 0
        self.last_access = next(_clock)

    def __lt__(self, other: TreeNode) -> bool:
        return self.last_access < other.last_access


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class RadixCache(PrefixCache):
    """Prefix cache that shares KV between requests at token granularity."""

    def reset(self) -> None:
        self.root = TreeNode([], self.no_slots(), None)
        self.root.lock_ref = 1
        self._evictable = 0
        self._protected = 0

    def __init__(self, req_to_token_pool, kv_pool):
        super().__init__(req_to_token_pool, kv_pool)
        self.reset()

    # ---- lookup and insertion --------------------------------------------------------------
    def match_prefix(self, tokens: list[int]) -> tuple[torch.Tensor, TreeNode]:
        node, values, i = self.root, [], 0
        node.last_access = next(_clock)
        while i < len(tokens) and tokens[i] in node.children:
            child = node.children[tokens[i]]
            n = common_prefix_length(child.key, tokens[i:])
            partial = n < len(child.key)
            if partial:
                child = self._split(child, n)
            child.last_access = next(_clock)
            values.append(child.value)
            node, i = child, i + n
            if partial:
                break
        slots = torch.cat(values) if values else self.no_slots()
        return slots, node

    def insert(self, tokens: list[int], slots: torch.Tensor) -> int:
        """Add tokens -> slots; returns how many leading tokens were already present
        (the caller still owns, and must free, its own slots for those)."""
        node, i = self.root, 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                leaf = TreeNode(list(tokens[i:]), slots[i:].clone(), node)
                node.children[tokens[i]] = leaf
                self._evictable += len(leaf.key)
                return i
            n = common_prefix_length(child.key, tokens[i:])
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = next(_clock)
            node, i = child, i + n
        return i

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child`'s edge after n tokens; returns the new upper node."""
        upper = TreeNode(child.key[:n], child.value[:n], child.parent)
        upper.lock_ref = child.lock_ref
        upper.last_access = child.last_access
        upper.children = {child.key[n]: child}
        child.parent.children[child.key[0]] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        return upper

    # ---- locking ---------------------------------------------------------------------------
    def lock(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self._evictable -= len(node.key)
                self._protected += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 1:
                self._evictable += len(node.key)
                self._protected -= len(node.key)
            node.lock_ref -= 1
            node = node.parent

    # ---- request hand-over -----------------------------------------------------------------
    def cache_finished_req(self, req: Req) -> None:
        self._insert_req(req)
        if req.last_node is not None:
            self.unlock(req.last_node)
        req.last_node, req.prefix_len = None, 0

    def cache_unfinished_req(self, req: Req) -> None:
        self._insert_req(req)
        slots, node = self.match_prefix(req.all_ids[: req.kv_len])
        self.req_to_token_pool.req_to_token[req.req_pool_idx, : len(slots)] = slots.to(torch.int32)
        self.lock(node)
        if req.last_node is not None:
            self.unlock(req.last_node)
        req.last_node, req.prefix_len = node, len(slots)

    def _insert_req(self, req: Req) -> None:
        slots = self.req_slots(req)
        present = self.insert(req.all_ids[: req.kv_len], slots)
        # The request computed its own KV for tokens another request inserted meanwhile.
        self.kv_pool.free(slots[req.prefix_len : present])

    # ---- eviction --------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        leaves = [n for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(leaves)
        freed = 0
        while freed < num_tokens and leaves:
            leaf = heapq.heappop(leaves)
            self.kv_pool.free(leaf.value)
            freed += len(leaf.key)
            self._evictable -= len(leaf.key)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(leaves, parent)
        return freed

    def _nodes(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root:
                yield node
            stack.extend(node.children.values())

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def cached_slots(self) -> torch.Tensor:
        values = [n.value for n in self._nodes()]
        return torch.cat(values) if values else self.no_slots()

    def node_weights(self, nodes: list[TreeNode]) -> dict[int, int]:
        """How many of `nodes` lie in each node's subtree (by id), for dfs-weight scheduling."""
        weight: dict[int, int] = {}
        for node in nodes:
            while node is not None:
                weight[id(node)] = weight.get(id(node), 0) + 1
                node = node.parent
        return weight
