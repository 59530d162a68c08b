"""The data-parallel router: its approximate prefix trees, the cache-aware choice with its
load fallbacks, the other methods, the totals of worker stats, and the options' checks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.launch_server import main as launch_main
from runtime.server.metrics import total_stats
from runtime.server.router import BALANCE_ABS, PrefixTree, Router
from runtime.server_args import ServerArgs


def common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), max_size=12), max_size=12),
    st.lists(st.integers(0, 3), max_size=12),
)
def test_tree_matches_the_longest_common_prefix_of_what_was_inserted(seqs, probe):
    tree = PrefixTree(max_tokens=10_000)
    for s in seqs:
        tree.insert(s)
    assert tree.match(probe) == max((common(s, probe) for s in seqs), default=0)
    distinct_prefixes = {tuple(s[:i]) for s in seqs for i in range(1, len(s) + 1)}
    assert tree.size == len(distinct_prefixes)  # one token per distinct prefix, shared


def test_tree_stays_within_its_bound_and_drops_the_least_recently_used_first():
    tree = PrefixTree(max_tokens=20)
    old, new = list(range(100, 110)), list(range(200, 210))
    tree.insert(old)
    tree.insert(new)
    tree.match(old)  # old is now the more recently used
    tree.insert(list(range(300, 310)))
    assert tree.size <= 20
    assert tree.match(old) == 10 and tree.match(new) == 0
    tree.clear()
    assert tree.size == 0 and tree.match(old) == 0


def test_a_session_sticks_to_the_worker_holding_its_prefix():
    router = Router(2, "cache_aware", 10_000)
    a, b = list(range(1000, 1100)), list(range(2000, 2100))
    first_a, first_b = router.route(a), router.route(b)
    assert first_a.worker != first_b.worker  # unrelated prompts spread
    for turn in range(3):
        a = a + [turn] * 10
        b = b + [turn] * 10
        ra, rb = router.route(a), router.route(b)
        assert (ra.worker, ra.reason) == (first_a.worker, "cache")
        assert (rb.worker, rb.reason) == (first_b.worker, "cache")
        assert ra.matched_tokens == len(a) - 10


def test_a_short_match_goes_to_the_least_loaded_worker():
    router = Router(2, "cache_aware", 10_000)
    shared = list(range(10))
    assert router.route(shared + list(range(100, 110))).worker == 0
    # 10 of 40 tokens match worker 0: not worth it, worker 1 is idle
    route = router.route(shared + list(range(200, 230)))
    assert (route.worker, route.reason) == (1, "load")


def test_a_busy_worker_loses_its_cache_hits_to_an_idle_one():
    router = Router(2, "cache_aware", 10_000)
    prefix = list(range(500))
    routes = [router.route(prefix + [i]) for i in range(2 * BALANCE_ABS + 2)]
    assert routes[0].worker == 0
    assert [r.worker for r in routes[:BALANCE_ABS]] == [0] * BALANCE_ABS
    assert routes[BALANCE_ABS].worker == 1 and routes[BALANCE_ABS].reason == "load"
    assert abs(router.in_flight[0] - router.in_flight[1]) <= 1  # both hold the prefix now
    for r in routes:
        router.release(r.worker)
    assert router.in_flight == [0, 0]


def test_round_robin_and_shortest_queue():
    rr = Router(3, "round_robin", 100)
    assert [rr.route([1, 2]).worker for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    sq = Router(2, "shortest_queue", 100)
    assert [sq.route([1, 2]).worker for _ in range(4)] == [0, 1, 0, 1]
    sq.release(1)
    assert sq.route([1, 2]).worker == 1
    # without a prefix cache there is nothing to aim at
    assert Router(2, "cache_aware", 100, cache_enabled=False).method == "shortest_queue"


def test_total_stats_add_counters_and_recompute_the_hit_rate():
    w0 = {"running": 2, "cached_prompt_tokens": 30, "computed_prompt_tokens": 70}
    w1 = {"running": 1, "cached_prompt_tokens": 90, "computed_prompt_tokens": 10}
    w0["cache_hit_rate"], w1["cache_hit_rate"] = 0.3, 0.9
    total = total_stats([w0, w1])
    assert total["running"] == 3 and total["cached_prompt_tokens"] == 120
    assert total["cache_hit_rate"] == pytest.approx(0.6)


def test_bad_data_parallel_options():
    with pytest.raises(ValueError, match="dp_size"):
        ServerArgs(dp_size=0)
    with pytest.raises(ValueError, match="dp_size must be at most"):
        ServerArgs(dp_size=10**20)
    with pytest.raises(ValueError, match="load_balance_method"):
        ServerArgs(load_balance_method="random")
    for argv in (["--dp-size", "0"], ["--load-balance-method", "nope"]):
        with pytest.raises(SystemExit) as exc:
            launch_main(argv)
        assert exc.value.code == 2


def test_the_offline_engine_refuses_data_parallelism():
    from runtime import Engine

    with pytest.raises(ValueError, match="--dp-size"):
        Engine(model_path="smollm2", dp_size=2)
