"""Data-parallel routing (`--dp-size N`): which scheduler worker gets a request.

Each worker has its own radix cache, so a request runs fastest on the worker that already
holds the longest prefix of it. The router keeps, per worker, an approximate prefix tree of
the prompts it sent there (bounded to the worker's KV pool size, least recently used leaves
pruned first, cleared by /flush_cache), and counts each worker's requests in flight.

`--load-balance-method cache_aware` (the default) routes a request like this:

1. Find the worker whose tree matches the longest prefix of the prompt (ties: fewer requests
   in flight, then lower index).
2. If that match covers less than MIN_MATCH_RATIO (half) of the prompt, the cache barely
   helps: send it to the least-loaded worker instead (ties: the smaller tree, which has the
   most room, then lower index).
3. If that worker is busy, send it to the least-loaded worker instead. Busy means at least
   BALANCE_ABS (2) more requests in flight than the least-loaded worker *and* more than
   BALANCE_REL (1.5) times as many: small absolute gaps are not worth a cache miss, and at
   high load a gap of a few requests is noise.

`round_robin` cycles through the workers; `shortest_queue` always picks the least-loaded
worker. With `--disable-radix-cache` there is no cache to aim at and cache_aware behaves as
shortest_queue.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from runtime.server_args import LOAD_BALANCE_METHODS

MIN_MATCH_RATIO = 0.5
BALANCE_ABS = 2
BALANCE_REL = 1.5

_clock = itertools.count()


class _Node:
    __slots__ = ("children", "parent", "key", "last_access")

    def __init__(self, key: list[int], parent: _Node | None):
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.key = key  # token ids of the edge into this node
        self.last_access = next(_clock)

    def __lt__(self, other: _Node) -> bool:
        return self.last_access < other.last_access


def _common_prefix_length(a: list[int], b: list[int], start: int) -> int:
    n = min(len(a), len(b) - start)
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


class PrefixTree:
    """Token ids one worker has probably cached: a radix tree without values, holding at most
    `max_tokens` tokens (least recently used leaves go first)."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.clear()

    def clear(self) -> None:
        self.root = _Node([], None)
        self.size = 0

    def match(self, tokens: list[int]) -> int:
        """How many leading tokens of `tokens` the tree holds (marks them recently used)."""
        node, i = self.root, 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                break
            n = _common_prefix_length(child.key, tokens, i)
            child.last_access = next(_clock)
            i += n
            if n < len(child.key):
                break
            node = child
        return i

    def insert(self, tokens: list[int]) -> None:
        node, i = self.root, 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                node.children[tokens[i]] = _Node(list(tokens[i:]), node)
                self.size += len(tokens) - i
                break
            n = _common_prefix_length(child.key, tokens, i)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = next(_clock)
            node, i = child, i + n
        if self.size > self.max_tokens:
            self._prune(self.size - self.max_tokens)

    def _split(self, child: _Node, n: int) -> _Node:
        upper = _Node(child.key[:n], child.parent)
        upper.last_access = child.last_access
        upper.children = {child.key[n]: child}
        child.parent.children[child.key[0]] = upper
        child.key, child.parent = child.key[n:], upper
        return upper

    def _prune(self, num_tokens: int) -> None:
        leaves = [n for n in self._nodes() if not n.children]
        heapq.heapify(leaves)
        removed = 0
        while removed < num_tokens and leaves:
            leaf = heapq.heappop(leaves)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            removed += len(leaf.key)
            if parent is not self.root and not parent.children:
                heapq.heappush(leaves, parent)
        self.size -= removed

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())


@dataclass
class Route:
    """Where a request went and why (`cache`, `load`, `round_robin`, `shortest_queue`)."""

    worker: int
    reason: str
    matched_tokens: int = 0


class Router:
    """Picks a worker for each request and tracks each worker's requests in flight."""

    def __init__(self, num_workers: int, method: str, tree_tokens: int, cache_enabled: bool = True):
        if method not in LOAD_BALANCE_METHODS:
            raise ValueError(f"load_balance_method must be one of {LOAD_BALANCE_METHODS}")
        if method == "cache_aware" and not cache_enabled:
            method = "shortest_queue"
        self.method = method
        self.in_flight = [0] * num_workers
        self.trees = [PrefixTree(tree_tokens) for _ in range(num_workers)]
        self._next = 0  # round robin

    @property
    def num_workers(self) -> int:
        return len(self.in_flight)

    def route(self, input_ids: list[int]) -> Route:
        """Choose a worker for a new request and count it in flight there."""
        if self.num_workers == 1:
            route = Route(0, "only")
        elif self.method == "round_robin":
            route = Route(self._next, "round_robin")
            self._next = (self._next + 1) % self.num_workers
        elif self.method == "shortest_queue":
            route = Route(self._least_loaded(), "shortest_queue")
        else:
            route = self._cache_aware(input_ids)
            self.trees[route.worker].insert(input_ids)
        self.in_flight[route.worker] += 1
        return route

    def release(self, worker: int) -> None:
        """A request on `worker` ended."""
        self.in_flight[worker] = max(self.in_flight[worker] - 1, 0)

    def clear(self, worker: int) -> None:
        """The worker's cache was flushed."""
        self.trees[worker].clear()

    def _cache_aware(self, input_ids: list[int]) -> Route:
        matches = [tree.match(input_ids) for tree in self.trees]
        best = min(range(self.num_workers), key=lambda w: (-matches[w], self.in_flight[w], w))
        idlest = self._least_loaded()
        if matches[best] < MIN_MATCH_RATIO * len(input_ids):
            return Route(idlest, "load", matches[idlest])
        if self._busy(best, idlest):
            return Route(idlest, "load", matches[idlest])
        return Route(best, "cache", matches[best])

    def _busy(self, worker: int, idlest: int) -> bool:
        load, least = self.in_flight[worker], self.in_flight[idlest]
        return load - least >= BALANCE_ABS and load > BALANCE_REL * least

    def _least_loaded(self) -> int:
        return min(
            range(self.num_workers), key=lambda w: (self.in_flight[w], self.trees[w].size, w)
        )
