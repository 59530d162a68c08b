"""RadixCache: property-based state machine over insert / match / lock / unlock / evict."""

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
from runtime.cache.radix_cache import RadixCache

POOL = 64
tokens_strategy = st.lists(st.integers(0, 3), min_size=1, max_size=12)


class Running:
    """A simulated request: the prefix it matched (locked) and the slots it owns."""

    def __init__(self, tokens, prefix, node, own):
        self.tokens, self.prefix, self.node, self.own = tokens, prefix, node, own


class RadixCacheMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    def __init__(self):
        super().__init__()
        self.kv = TokenToKVPool(POOL, 1, 1, 2, torch.float32)
        self.cache = RadixCache(ReqToTokenPool(4, 16), self.kv)
        self.meaning = {}  # slot -> the token prefix whose last token it stores
        self.running: list[Running] = []

    @rule(target=requests, tokens=tokens_strategy)
    def start(self, tokens):
        prefix, node = self.cache.match_prefix(tokens)
        for j, slot in enumerate(prefix.tolist()):
            assert self.meaning[slot] == tuple(tokens[: j + 1])
        self.cache.lock(node)
        need = len(tokens) - len(prefix)
        if self.kv.available() < need:
            self.cache.evict(need - self.kv.available())
        own = self.kv.alloc(need)
        if own is None:
            self.cache.unlock(node)
            return None
        for j, slot in enumerate(own.tolist()):
            self.meaning[slot] = tuple(tokens[: len(prefix) + j + 1])
        req = Running(tokens, prefix, node, own)
        self.running.append(req)
        return req

    @rule(req=consumes(requests))
    def finish(self, req):
        if req is None:
            return
        slots = torch.cat([req.prefix, req.own])
        present = self.cache.insert(req.tokens, slots)
        assert present >= len(req.prefix)
        self.kv.free(slots[len(req.prefix) : present])
        self.cache.unlock(req.node)
        self.running.remove(req)

    @rule(n=st.integers(1, POOL))
    def evict(self, n):
        before = self.cache.evictable_size()
        locked = {s for r in self.running for s in r.prefix.tolist()}
        freed = self.cache.evict(n)
        assert freed >= min(n, before)
        assert locked <= set(self.cache.cached_slots().tolist())  # locked prefixes survive

    @rule(tokens=tokens_strategy)
    def match(self, tokens):
        prefix, _ = self.cache.match_prefix(tokens)
        for j, slot in enumerate(prefix.tolist()):
            assert self.meaning[slot] == tuple(tokens[: j + 1])

    @invariant()
    def every_slot_has_exactly_one_owner(self):
        free = self.kv.free_slots.tolist()
        tree = self.cache.cached_slots().tolist()
        owned = [s for r in self.running for s in r.own.tolist()]
        everything = free + tree + owned
        assert len(everything) == len(set(everything)) == POOL
        assert set(everything) == set(range(1, POOL + 1))
        assert self.cache.total_size() == len(tree)

    @invariant()
    def protected_size_is_what_running_requests_lock(self):
        locked_nodes = set()
        for r in self.running:
            node = r.node
            while node is not self.cache.root:
                locked_nodes.add(id(node))
                node = node.parent
        tree_nodes = {id(n): n for n in self.cache._nodes()}
        assert self.cache.protected_size() == sum(
            len(tree_nodes[i].key) for i in locked_nodes if i in tree_nodes
        )


TestRadixCache = RadixCacheMachine.TestCase
TestRadixCache.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_split_and_reuse():
    kv = TokenToKVPool(32, 1, 1, 2, torch.float32)
    cache = RadixCache(ReqToTokenPool(2, 8), kv)
    a = kv.alloc(5)
    assert cache.insert([1, 2, 3, 4, 5], a) == 0
    b = kv.alloc(4)
    present = cache.insert([1, 2, 9, 9], b)
    assert present == 2
    kv.free(b[:2])
    slots, node = cache.match_prefix([1, 2, 3, 7])
    assert slots.tolist() == a[:3].tolist() and node.key == [3]
    slots, _ = cache.match_prefix([1, 2, 9, 9, 9])
    assert slots.tolist() == a[:2].tolist() + b[2:].tolist()
    assert cache.total_size() == 7
    cache.lock(node)
    assert cache.evict(100) == 4  # [4, 5] and [9, 9]; the locked path [1, 2], [3] stays
    assert cache.protected_size() == 3 and cache.evictable_size() == 0


def test_kv_pool_takes_freed_slots_in_order_and_counts_them():
    """Frees wait apart from the free list until an alloc needs them; slots come out in the
    order a merge at every free would give, and available() counts the waiting ones."""
    from runtime.cache import memory_pool

    kv = TokenToKVPool(10, 1, 1, 2, torch.float32)
    first = kv.alloc(8)
    kv.free(first[5:7])
    kv.free(first[:2])
    kv.free(first[:0])  # nothing
    assert kv.available() == 2 + 4
    assert kv.alloc(3).tolist() == [9, 10, 6]  # the two never taken, then the frees in order
    assert kv.alloc(4) is None and kv.available() == 3  # too many: nothing taken
    assert kv.free_slots.tolist() == [7, 1, 2]
    for slot in first[2:5]:
        kv.free(slot[None])
    assert kv.alloc(6).tolist() == [7, 1, 2, 3, 4, 5] and kv.available() == 0
    many = memory_pool._MERGE_EVERY
    kv = TokenToKVPool(many + 5, 1, 1, 2, torch.float32)
    for slot in kv.alloc(many):  # a bounded number of frees kept apart
        kv.free(slot[None])
    assert not kv._freed and kv.available() == many + 5
