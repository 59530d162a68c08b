"""Order of the waiting queue: which request is admitted first."""

from __future__ import annotations

import random

from runtime.cache.prefix_cache import PrefixCache
from runtime.cache.radix_cache import RadixCache, TreeNode
from runtime.scheduler.req import Req

# Matching every waiting request against the tree costs O(queue x prompt); past this queue
# length lpm and dfs-weight fall back to fcfs.
MAX_QUEUE_FOR_CACHE_AWARE = 128


def match_len_limit(req: Req) -> int:
    """How much of a request may come from the cache: never its last token (its logits are
    needed), and not past the first prompt position whose input logprob is still owed."""
    limit = req.seq_len - 1
    if req.logprob_start_len >= 0:
        pending = req.logprob_start_len + len(req.input_token_logprobs) - 1
        if pending < len(req.origin_input_ids) - 1:
            limit = min(limit, max(pending, 0))
    return limit


def order_waiting(
    policy: str, waiting: list[Req], cache: PrefixCache, rng: random.Random
) -> list[Req]:
    """Return the waiting requests in admission order for `policy`."""
    cache_aware = isinstance(cache, RadixCache) and len(waiting) <= MAX_QUEUE_FOR_CACHE_AWARE
    if policy == "lpm" and cache_aware:
        lengths = {
            id(r): len(cache.match_prefix(r.all_ids[: match_len_limit(r)])[0]) for r in waiting
        }
        return sorted(waiting, key=lambda r: -lengths[id(r)])  # stable: fcfs among equals
    if policy == "dfs-weight" and cache_aware:
        return _dfs_weight_order(waiting, cache)
    if policy == "lof":
        return sorted(waiting, key=lambda r: -r.sampling_params.max_new_tokens)
    if policy == "random":
        shuffled = list(waiting)
        rng.shuffle(shuffled)
        return shuffled
    return list(waiting)


def _dfs_weight_order(waiting: list[Req], cache: RadixCache) -> list[Req]:
    """Visit the tree depth-first, heaviest subtree (most waiting requests) first."""
    at_node: dict[int, list[Req]] = {}
    nodes: list[TreeNode] = []
    for req in waiting:
        _, node = cache.match_prefix(req.all_ids[: match_len_limit(req)])
        at_node.setdefault(id(node), []).append(req)
        nodes.append(node)
    weight = cache.node_weights(nodes)
    order: list[Req] = []
    stack = [cache.root]
    while stack:
        node = stack.pop()
        order.extend(at_node.get(id(node), []))
        children = [c for c in node.children.values() if id(c) in weight]
        stack.extend(sorted(children, key=lambda c: weight[id(c)]))  # heaviest popped first
    return order
