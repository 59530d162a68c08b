"""Waiting-queue order of each scheduling policy over a populated radix cache."""

import random

import torch

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
from runtime.cache.radix_cache import RadixCache
from runtime.sampling.params import SamplingParams
from runtime.scheduler.policy import MAX_QUEUE_FOR_CACHE_AWARE, order_waiting
from runtime.scheduler.req import Req


def make_cache(*sequences):
    kv = TokenToKVPool(256, 1, 1, 2, torch.float32)
    cache = RadixCache(ReqToTokenPool(2, 64), kv)
    for seq in sequences:
        cache.insert(seq, kv.alloc(len(seq)))
    return cache


def req(name, tokens, max_new=8):
    return Req(name, tokens, SamplingParams(max_new_tokens=max_new))


def names(reqs):
    return [r.rid for r in reqs]


def test_lpm_puts_the_longest_cached_prefix_first():
    cache = make_cache([1, 2, 3, 4, 5, 6], [9, 9])
    waiting = [
        req("none", [7, 7, 7]),
        req("short", [9, 9, 1]),
        req("long", [1, 2, 3, 4, 5, 0]),
        req("mid", [1, 2, 3, 8]),
    ]
    assert names(order_waiting("lpm", waiting, cache, random.Random(0))) == [
        "long",
        "mid",
        "short",
        "none",
    ]
    assert names(order_waiting("fcfs", waiting, cache, random.Random(0))) == [
        "none",
        "short",
        "long",
        "mid",
    ]


def test_dfs_weight_visits_the_heaviest_subtree_first():
    cache = make_cache([1, 1, 1, 1], [2, 2, 2, 2])
    waiting = [
        req("a1", [1, 1, 1, 1, 5]),
        req("b1", [2, 2, 2, 2, 5]),
        req("b2", [2, 2, 2, 2, 6]),
        req("b3", [2, 2, 2, 2, 7]),
    ]
    order = names(order_waiting("dfs-weight", waiting, cache, random.Random(0)))
    assert order[:3] == ["b1", "b2", "b3"] and order[3] == "a1"


def test_lof_and_random():
    cache = make_cache()
    waiting = [req("small", [1], 4), req("big", [2], 400), req("mid", [3], 40)]
    assert names(order_waiting("lof", waiting, cache, random.Random(0))) == ["big", "mid", "small"]
    shuffled = order_waiting("random", waiting, cache, random.Random(3))
    assert sorted(names(shuffled)) == ["big", "mid", "small"]


def test_long_queues_fall_back_to_fcfs():
    cache = make_cache([5, 5, 5, 5])
    waiting = [req(f"r{i}", [i % 7, 1]) for i in range(MAX_QUEUE_FOR_CACHE_AWARE)]
    waiting.append(req("cached", [5, 5, 5, 5, 1]))
    assert order_waiting("lpm", waiting, cache, random.Random(0))[-1].rid == "cached"
    assert order_waiting("lpm", waiting[-3:], cache, random.Random(0))[0].rid == "cached"
