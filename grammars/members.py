"""The NFA of a ("members", ...) node (grammars.automaton): an object's members in the
schema's order with counts (and, with `needs`, which of them are present), in any order (one
state per set of members written and, where counted, per count of extras), or in any order
with keys that may come again."""

from __future__ import annotations

REPEATING = "repeating"  # a "members" node's order: any, keys may come again
MAX_NEEDED_CLASSES = 16  # states of what is still needed at a member (json_schema.one_of)


def build_members(nfa, node, s: int, e: int) -> None:
    """Build ("members", items, sep, extra, (lo, hi), order, needs) between NFA states s and e
    (needs: None, or for the schema's order, sets of item indices one of which must all be
    present: an anyOf of `required` lists)."""
    if node[5] == REPEATING:
        repeating(nfa, node, s, e)
    elif node[5]:
        any_order(nfa, node, s, e)
    else:
        fixed_order(nfa, node, s, e)


def fixed_order(nfa, node, s: int, e: int) -> None:
    """Separated members in a fixed order, optional ones skippable, then any number of
    `extra` members, lo..hi of them in all; one track of states per count of members
    written so far (0 .. hi; where hi is None, counts from max(lo, 1) on are alike)."""
    _, items, sep, extra, (lo, hi), _, needs = node
    top = max(lo, 1) if hi is None else hi

    def after(c: int) -> int | None:  # the track after one more member
        return c + 1 if c < top else (top if hi is None else None)

    if needs is not None:
        _fixed_order_needing(nfa, node, s, e, after)
        return

    track = [s] + [nfa.new() for _ in range(top)]
    for item, required in items:
        nxt = [nfa.new() for _ in range(top + 1)]
        _member_steps(nfa, item, sep, track, nxt, after)
        if not required:
            for pair in zip(track, nxt):
                nfa.eps += pair
        track = nxt
    if extra is not None:  # extras' keys may repeat: toward lo only the first counts
        first = lambda c: after(c) if c + 1 >= lo else None  # noqa: E731
        _member_steps(nfa, extra, sep, track, track, first)
    for c, p in enumerate(track):
        if c >= lo:
            nfa.eps += (p, e)


def _fixed_order_needing(nfa, node, s: int, e: int, after) -> None:
    """fixed_order where one of the sets of item indices `needs` must all be present: the
    tracks are kept per count and per what is still needed (needed_after), so an object is
    one automaton, not one per set (an anyOf over `required` lists made parallel copies of
    the object)."""
    _, items, sep, extra, (lo, _), _, needs = node
    track = {(0, least_sets(needs)): s}
    for i, (item, required) in enumerate(items):
        nxt: dict[tuple, int] = {}
        mids: dict[int, int] = {}
        for (c, left), p in track.items():
            target = (after(c), needed_after(left, i, True))
            if target[0] is not None and target[1]:
                if target not in nxt:
                    nxt[target] = nfa.new()
                _member_from(nfa, item, sep, mids, p, c, nxt[target])
            skipped = (c, needed_after(left, i, False))
            if not required and skipped[1]:
                if skipped not in nxt:
                    nxt[skipped] = nfa.new()
                nfa.eps += (p, nxt[skipped])
        track = nxt
    if extra is not None:  # extras' keys may repeat: toward lo only the first counts
        mids = {}
        todo = sorted(track, key=lambda key: key[0])
        while todo:  # by count: an extra leads to a higher one, or to the same (the top)
            c, left = source = todo.pop(0)
            target = (after(c) if c + 1 >= lo else None, left)
            if target[0] is None:
                continue
            if target not in track:
                track[target] = nfa.new()
                todo.append(target)
            _member_from(nfa, extra, sep, mids, track[source], c, track[target])
    for (c, left), p in track.items():
        if c >= lo and frozenset() in left:
            nfa.eps += (p, e)


def needed_after(left: frozenset, key, taken: bool) -> frozenset:
    """What is still needed (sets of keys, one of which must all come) after `key` is taken
    or passed over; empty: nothing can complete a set any more."""
    if taken:
        return least_sets(frozenset(n - {key} for n in left))
    return frozenset(n for n in left if key not in n)


def least_sets(sets: frozenset) -> frozenset:
    """`sets` without those holding another (an empty set: one of them is complete)."""
    if frozenset() in sets:
        return frozenset({frozenset()})
    return frozenset(x for x in sets if not any(y < x for y in sets))


def any_order(nfa, node, s: int, e: int) -> None:
    """The items in any order, each at most once (the required ones all present, lo..hi
    members in all), extras anywhere: one state per set of items written (bit i: item i)
    and, where extras are counted, per count of extras (see extra_counts); each item and
    extra is built once per state it leads to."""
    _, items, sep, extra, (lo, hi), _, _ = node
    n = len(items)
    top = extra_counts(node)
    if top is None:
        _any_order_uncounted(nfa, node, s, e)
        return
    room = n + top if hi is None else hi  # members an object may hold
    state = {}  # (set of items written, extras written) -> state
    for used in range(1 << n):
        for k in range(min(top, room - used.bit_count()) + 1):
            state[used, k] = s if used == k == 0 else nfa.new()

    def member(node, sources, target: int) -> None:  # from each source state: sep, node
        mid = nfa.new()
        for key in sources:
            if key == (0, 0):
                nfa.eps += (s, mid)
            else:
                nfa.build(sep, state[key], mid)
        nfa.build(node, mid, target)

    for (used, k), target in state.items():
        for i in range(n):
            if used >> i & 1:
                member(items[i][0], [(used & ~(1 << i), k)], target)
        if k:  # past `top` (no maxProperties) extras no longer change the count
            loop = [(used, k)] if hi is None and k == top else []
            member(extra, [(used, k - 1), *loop], target)
    needed = sum(1 << i for i, (_, required) in enumerate(items) if required)
    for (used, k), p in state.items():
        if used & needed == needed and used.bit_count() + min(k, 1) >= lo:
            nfa.eps += (p, e)  # toward lo only one extra counts: extras' keys may repeat


def repeating(nfa, node, s: int, e: int) -> None:
    """Members in any order where a key may come again (objects with too many properties
    to track each set of them; no member counts): one state per set of required items
    written, and one for "only others written so far"; every member is built once per
    state it leads to, from that state and, for a required one, from the set without it."""
    _, items, sep, extra, _, _, _ = node
    required = [i for i, (_, req) in enumerate(items) if req]
    bit = {i: 1 << k for k, i in enumerate(required)}
    top = (1 << len(required)) - 1
    state = {m: nfa.new() for m in range(top + 1)}  # something written, required set m
    parts = [(item, bit.get(i, 0)) for i, (item, _) in enumerate(items)]
    if extra is not None:
        parts.append((extra, 0))
    for m, target in state.items():
        for item, b in parts:
            if b and not m & b:
                continue  # a required item leads to a set holding it
            mid = nfa.new()
            for src in {m, m & ~b}:
                nfa.build(sep, state[src], mid)
            if m & ~b == 0:  # the first member
                nfa.eps += (s, mid)
            nfa.build(item, mid, target)
    nfa.eps += (state[top], e)
    if not required:
        nfa.eps += (s, e)


def _any_order_uncounted(nfa, node, s: int, e: int) -> None:
    """_members_any_order where extras do not count: the empty set after extras only."""
    _, items, sep, extra, _, _, _ = node
    n = len(items)
    state = {0: s}  # set of items written -> state; the empty set before anything
    for used in range(1, 1 << n):
        state[used] = nfa.new()
    after_extra = nfa.new()  # the empty set after an extra member
    sources = {0: [(s, False), (after_extra, True)]}  # (state, something written)
    for used in range(1, 1 << n):
        sources[used] = [(state[used], True)]
    for target in range(1, 1 << n):
        for i in range(n):
            if not target >> i & 1:
                continue
            mid = nfa.new()
            nfa.build(items[i][0], mid, state[target])
            for p, written in sources[target & ~(1 << i)]:
                if written:
                    nfa.build(sep, p, mid)
                else:
                    nfa.eps += (p, mid)
    if extra is not None:
        for used, places in sources.items():
            mid = nfa.new()
            nfa.build(extra, mid, after_extra if used == 0 else state[used])
            for p, written in places:
                if written:
                    nfa.build(sep, p, mid)
                else:
                    nfa.eps += (p, mid)
    needed = sum(1 << i for i, (_, required) in enumerate(items) if required)
    lo, hi = node[4]  # member counts (only without extras: those are not counted here)
    for used, places in sources.items():
        written = used.bit_count()
        if used & needed == needed and lo <= written and (hi is None or written <= hi):
            for p, _ in places:
                nfa.eps += (p, e)


def _member_steps(nfa, item, sep, track: list, nxt: list, after) -> None:
    """One member from each track to the next count's track; the tracks that lead to one
    count share a single copy of the member."""
    mids: dict[int, int] = {}
    for c, p in enumerate(track):
        target = after(c)
        if target is not None:
            _member_from(nfa, item, sep, mids, p, c, nxt[target])


def _member_from(nfa, item, sep, mids: dict, source: int, count: int, target: int) -> None:
    """One member from state `source` (after `count` members: a separator first unless 0) to
    state `target`, through the single copy of the member that leads there (mids: target ->
    the state before that copy)."""
    mid = mids.get(target)
    if mid is None:
        mid = mids[target] = nfa.new()
        nfa.build(item, mid, target)
    if count == 0:
        nfa.eps += (source, mid)
    else:
        nfa.build(sep, source, mid)


def member_copies(node) -> int:
    """How many times an any-order ("members", ...) node builds each member: once per state
    of _members_any_order or _members_repeating."""
    if node[5] == REPEATING:
        return 1 << sum(1 for _, required in node[1] if required)
    return (1 << len(node[1])) * ((extra_counts(node) or 0) + 1)


def extra_counts(node) -> int | None:
    """The most extra members an any-order ("members", ...) node counts: None where extras are
    not counted (no extras, or no minProperties/maxProperties); else maxProperties (0: no
    extra at all), or 1 ("some") without one, as only one extra counts toward minProperties
    (their keys may repeat)."""
    _, _, _, extra, (lo, hi), _, _ = node
    if extra is None or (lo, hi) == (0, None):
        return None
    return 1 if hi is None else hi
