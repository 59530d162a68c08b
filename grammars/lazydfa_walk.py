"""The token walk of a mask: every token of the vocabulary's trie read from one frame state of
the lazily determinised automaton (lazydfa.py), building states on the way."""

from __future__ import annotations

import numpy as np

from grammars.lazydfa import NEED_SPACE, materialize, njit, utf8_tail
from grammars.lazydfa_chain import extend_chain, pops_on_chain

_DEAD, _ALIVE, _VIABLE = 0, 1, 2  # fates of a suffix: dies; read to the end; a candidate
_ON, _ON_PASSED = 3, 4  # fates of a byte (_walk_past_chain): reads on, having passed a viable
# point or not


@njit(cache=True, nogil=True)
def _copy(src, dst):
    """dst[:] = src, as a plain loop: numba's slice assignment took 78 µs on 128k booleans,
    a loop 3."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@njit(cache=True, nogil=True)
def _set(words, i):
    """Set bit i of `words` (uint32, bit t of word w: token 32w + t)."""
    words[i >> 5] |= np.uint32(1 << (i & 31))


@njit(cache=True, nogil=True)
def _clear(words, i):
    words[i >> 5] &= ~np.uint32(1 << (i & 31))


@njit(cache=True, nogil=True)
def _has(words, i):
    return (words[i >> 5] >> np.uint32(i & 31)) & np.uint32(1) != 0


@njit(cache=True, nogil=True)
def set_bits(words, tokens):
    """Set the bits of `tokens` (int64) in `words` (uint32, bit t of word w: token 32w + t):
    np.bitwise_or.at took ~10 ns a token, this loop ~1."""
    for t in tokens:
        _set(words, t)


@njit(cache=True, nogil=True)
def unset_of(words, tokens):
    """Those of `tokens` (int64) whose bits are not set in `words` (see set_bits), in order:
    one pass, where numpy's expression made four arrays of the tokens' size."""
    out = np.empty(tokens.shape[0], np.int64)
    n = 0
    for t in tokens:
        if not _has(words, t):
            out[n] = t
            n += 1
    return out[:n]


@njit(cache=True, nogil=True)
def _allow_first(allowed, ids, n, words):
    """Set the bits of ids[:n] in `allowed` (zero there; `words`: the bits of all of `ids`):
    one by one, or where n is most of them all at once less the rest (the ~120,000 tokens a
    counter's chain allows with Llama-3 were set one by one)."""
    if 2 * n <= ids.shape[0]:
        for i in range(n):
            _set(allowed, ids[i])
        return
    for w in range(words.shape[0]):
        allowed[w] |= words[w]
    for i in range(n, ids.shape[0]):
        _clear(allowed, ids[i])


@njit(cache=True, nogil=True, inline="always")
def _fits(steps, limit, chars):
    """A token of vocabulary.chain_steps `steps` stays alive on a chain of `limit` states whose
    first `chars` take a multi-byte character a step."""
    return (0 < steps <= limit) or (steps < 0 and -steps <= chars)


@njit(cache=True, nogil=True)
def walk(
    nfa,
    dfa,
    g,
    trie,
    depth,
    hub,
    utf8,
    utf8_from_g,
    layout,
    can_pop,
    follow,
    track,
    allowed,
    candidates,
    prefix,
    fits,
    long_rows,
    limit,
    chars,
    chain,
    chain_memo,
    fates,
    loop_words,
):
    """Walk every token of a trie (the box of a vocabulary.TokenTrie, grammars/boxes.py; as
    are `nfa`, `dfa` and `layout`) from state g, building states on the
    way; a row reuses the states of the prefix it shares with the rows before, and rows that
    share a dead prefix are skipped. `depth` is the longest row.

    `hub` (0: none) is the state most of g's first bytes lead to, the start of a chain of states
    that each send every byte of a mask to the next (a loop, or the steps of a length counter);
    `layout` is the trie's vocabulary.ChainLayout for that mask (and utf8). A
    row on the chain jumps straight to its exit; when the chain is at least `depth` long, the
    tokens that never leave it are allowed at once and only the others are walked. With utf8
    (the chain is a loop that every multi-byte character leads back to: utf8_target), tokens
    that stay in the loop through such characters count as never leaving it, and with
    utf8_from_g so do those that start with such a character (it leads from g to the hub).

    Sets the bit of each token that ends alive in `allowed` (uint32 words, zero on entry; bit t
    of word w: token 32w + t) and writes to `candidates` those that died
    after passing, past their first byte, a state where a push could continue them, or (with
    can_pop) a final state where the next byte is one of `follow`, the bytes the frame below
    can read; returns the number of candidates, or NEED_SPACE.

    A chain that is not a loop (a length counter) but shorter than `depth` is used the same
    way when `prefix` (vocabulary.chain_steps: the steps by trie row, and `fits` the ids sorted
    by them, then runs of rows that all fit) is given: the tokens that never leave the mask and
    fit in the chain (`limit` states) are allowed at once, the longer ones (`long_rows`) are
    walked from the chain's end, and the others as for a loop. Where the chain's first
    `chars` states take a multi-byte character a step (a counter of characters,
    lazydfa_chain.chain_info), so are the tokens of such characters that fit: they are not
    walked. `chain`: the hub's chain as lazydfa_chain.chain_info left it (chain[0] = 0: not
    made yet), extended here; `chain_memo`: lazydfa_chain.extend_chain's; `fates`: where the hub
    is a loop, the fates of the layout's suffixes read from it (_suffix_fates) and a last slot,
    -1 until they are known, 0 once they are, 1 once `loop_words` is made from them
    (_loop_words, at the next walk to the hub: the tokens every state leading to it allows
    at once); both kept by the caller for the next walk to the same hub.

    A row of a first byte that does not lead to a loop's hub but reaches the hub later (the
    first letter of a named key, then any key) opens a subtree of rows sharing that prefix:
    those that never leave the loop's bytes are alive without a walk (of the 128k Llama-3
    tokens at an object's key, ~13,000 start with a named key's letter and were walked)."""
    ids, data, ptr, lcp = trie.ids, trie.data, trie.ptr, trie.lcp
    group, ends_at = trie.group, trie.ends
    exits, full, exit_rows, exit_lcp = layout.exits, layout.full, layout.rows, layout.lcp
    exit_group, in_chain, suffix_of = layout.group, layout.in_mask, layout.suffix_of
    suffixes, run_end = layout.suffixes, layout.run_end
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    exit_most, exit_fewest, exit_end, row_most, row_fewest, row_end = fits[6:]  # runs that
    # all fit (vocabulary.chain_steps)
    states = np.empty(depth + 1, np.int64)
    passed = np.zeros(depth + 1, np.bool_)  # passed a viable point within the first d bytes
    ends = np.zeros(1, np.bool_)
    covering = False
    if hub:
        if not chain[0]:
            chain[0], chain[1] = 1, hub
        pops = pops_on_chain(can_pop, follow, in_chain)
        if extend_chain(nfa, dfa, chain, ends, in_chain, pops, depth, chain_memo) < 0:
            return NEED_SPACE
        covering = chain[0] >= depth
    else:
        ends[0] = True
    # a loop at the hub: a row leaving it does so from the hub, so its fate is that of the
    # bytes from its exit on, walked once for all the rows that end with them (suffix_of)
    loop = covering and depth >= 2 and chain[2] == hub and fates.shape[0] > 0
    if not loop:
        fates = fates[:0]
    done_at = fates.shape[0] - 1  # fates' last slot (see above)
    if done_at >= 0 and fates[done_at] == 0:
        _loop_words(layout, ids, fates, utf8, loop_words)
        fates[done_at] = 1
    n_words = allowed.shape[0]
    if prefix.shape[0]:
        covering = True
        pos_ids, pos_steps, neg_ids, neg_steps, pos_words, neg_words = fits[:6]
        _allow_first(allowed, pos_ids, np.searchsorted(pos_steps, limit, "right"), pos_words)
        _allow_first(allowed, neg_ids, np.searchsorted(neg_steps, chars, "right"), neg_words)
    elif done_at >= 0 and fates[done_at] == 1:
        _copy(loop_words[:n_words], allowed)
    elif covering:
        _copy(full, allowed)
    n_cand = 0
    if not done[g] and materialize(nfa, dfa, g) < 0:
        return NEED_SPACE
    states[0] = g
    for first in range(256):
        lead = utf8 and utf8_tail(first)[0] > 0
        covered = covering and (in_chain[first] or lead)
        if covered and table[g, first] != hub and not (lead and utf8_from_g):
            for j in range(group[first], group[first + 1]):  # allowed wholesale above: undo
                _clear(allowed, ids[j])
            covered = False
        if table[g, first] == 0:
            continue
        on_chain = hub != 0 and table[g, first] == hub
        # the rows the prefix allows were allowed at once (lead bytes: chain_info checked g)
        skip = chars > 0 and (on_chain or utf8_tail(first)[0] > 0)
        known = 0  # states[0..known] hold the states of the prefix shared with this row
        dead_at = -1  # an earlier row sharing this row's prefix died reading byte dead_at
        dead_viable = False
        if covered and loop and in_chain[first] and table[g, first] == hub:
            if fates[done_at] < 0:
                if _suffix_fates(nfa, dfa, hub, suffixes, can_pop, follow, track, fates) < 0:
                    return NEED_SPACE
                fates[done_at] = 0
            # with the loop's words, those alive are set already: only candidates to find
            from_words = fates[done_at] == 1 and not lead
            if from_words and not _has(loop_words, (n_words << 5) + first):
                continue
            for k in range(exit_group[first], exit_group[first + 1]):
                fate = fates[suffix_of[k]]
                if fate == _ALIVE and not from_words:
                    _set(allowed, ids[exit_rows[k]])
                elif fate == _VIABLE:
                    candidates[n_cand] = ids[exit_rows[k]]
                    n_cand += 1
            continue
        if covered:
            lo, hi = exit_group[first], exit_group[first + 1]
        else:
            lo, hi = group[first], group[first + 1]
        # rows before hub_end share the first hub_depth bytes of a walked row, which led to
        # the hub of a loop: those that never leave its bytes are alive, without a walk
        hub_end, hub_depth = -1, 0
        k = lo - 1
        while k + 1 < hi:
            k += 1
            j = exit_rows[k] if covered else k
            shared = exit_lcp[k] if covered else lcp[j]
            if k < hub_end and _has(full, ids[j]):
                _set(allowed, ids[j])
                known = min(known, hub_depth)
                dead_at = -1
                continue
            known = min(known, shared)
            if dead_at >= 0 and shared > dead_at:
                if dead_viable:
                    candidates[n_cand] = ids[j]
                    n_cand += 1
                continue
            dead_at = -1
            if skip and k >= hub_end:
                if covered:  # the rest of the run fits as well: passed over at once
                    if exit_most[k] <= chars:
                        known = min(known, exit_fewest[k])
                        k = exit_end[k] - 1
                        continue
                elif row_most[j] <= chars:
                    known = min(known, row_fewest[j])
                    k = row_end[j] - 1
                    continue
                if _fits(prefix[j], limit, chars):
                    continue
            e = exits[j]
            if covered and on_chain and e <= chain[0]:  # it reaches chain[e], then leaves
                s = chain[e]
                if not done[s] and materialize(nfa, dfa, s) < 0:
                    return NEED_SPACE
                b = data[ptr[j] + e]
                if table[s, b] == 0 and not (
                    track and (viable[s, b] or (can_pop and accept[s] and follow[b]))
                ):  # the rows of the run all die there, and none is a candidate
                    k = run_end[k] - 1
                    known = min(known, 1)
                    dead_at, dead_viable = e, False
                    continue
            base = ptr[j]
            length = ptr[j + 1] - base
            if on_chain and e == length and chain[0] >= length:
                _set(allowed, ids[j])  # all on the chain, which goes that far
                continue
            i = known
            s = states[i]
            v = passed[i]
            while i < length:
                e = min(exits[j], chain[0]) if hub else 0
                if e > i > 0 and s == chain[i]:
                    for x in range(i + 1, e + 1):
                        states[x] = chain[x]
                        passed[x] = v
                    i = e
                    s = chain[e]
                    continue
                if not done[s] and materialize(nfa, dfa, s) < 0:
                    return NEED_SPACE
                b = data[base + i]
                if track and i > 0 and (viable[s, b] or (can_pop and accept[s] and follow[b])):
                    v = True
                s = table[s, b]
                if s == 0:
                    dead_at = i
                    dead_viable = v
                    break
                i += 1
                states[i] = s
                passed[i] = v
                if loop and s == hub and not covered and lcp[j] < i and k >= hub_end:
                    hub_end, hub_depth = ends_at[base + i - 1], i  # a node row j opened
            known = i
            if s != 0:
                _set(allowed, ids[j])
            elif v:
                candidates[n_cand] = ids[j]
                n_cand += 1
            elif not covered and i >= lcp[j]:  # skip the rows sharing the dead prefix
                k = ends_at[base + i] - 1
    if covering and chain[0] < depth:
        n_cand = _walk_past_chain(
            nfa, dfa, g, hub, chain, trie, long_rows, can_pop, follow, track, allowed,
            candidates, n_cand,
        )  # fmt: skip
    return n_cand


@njit(cache=True, nogil=True)
def _loop_words(layout, ids, fates, utf8, out):
    """What every walk from a state sending a byte of the loop's mask to its hub allows at
    once, into `out` (a mask's words, then 8 words of a bit per byte): the tokens that never
    leave the mask (the layout's `full`) and those leaving it whose suffix is _ALIVE from the
    hub; then the first bytes whose rows have a _VIABLE suffix (candidates to look for).
    With utf8, UTF-8 lead bytes are left to the walk (one in the mask would be walked from
    the state when that state, not the hub, takes the character: walk's utf8_from_g).
    A walk to a loop met before read every leaving row's fate (~28,000 rows of Llama-3 when a
    pattern is searched for in a string, some 100 µs)."""
    full, rows, group, in_mask = layout.full, layout.rows, layout.group, layout.in_mask
    suffix_of = layout.suffix_of
    n_words = full.shape[0]
    _copy(full, out[:n_words])
    out[n_words:] = 0
    for first in range(256):
        if not in_mask[first] or (utf8 and utf8_tail(first)[0] > 0):
            continue
        for k in range(group[first], group[first + 1]):
            fate = fates[suffix_of[k]]
            if fate == _ALIVE:
                _set(out, ids[rows[k]])
            elif fate == _VIABLE:
                _set(out, (n_words << 5) + first)


@njit(cache=True, nogil=True)
def _walk_past_chain(
    nfa, dfa, g, hub, chain, trie, rows, can_pop, follow, track, allowed, candidates, n_cand
):
    """walk's rows that never leave the chain's mask but outlast the chain: each from the
    chain's last state (rows whose first byte does not lead to the hub were walked with their
    first byte's group); returns the new number of candidates, or NEED_SPACE."""
    if not rows.shape[0]:
        return n_cand
    ids, data, ptr = trie.ids, trie.data, trie.ptr
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    last = chain[0]
    end_state = chain[last]
    if not done[end_state] and materialize(nfa, dfa, end_state) < 0:
        return NEED_SPACE
    # each row's first byte past the chain, read from its last state, decided once per byte:
    # near a counter's end most rows die there (at a string's maxLength every byte but the
    # quote: ~40,000 rows of Llama-3 a few characters before it)
    fate = np.empty(256, np.int8)
    dead = True  # every byte dies there, none a candidate: no row to look at
    for b in range(256):
        seen = track and (viable[end_state, b] or (can_pop and accept[end_state] and follow[b]))
        if table[end_state, b] != 0:
            fate[b] = _ON_PASSED if seen else _ON
        else:
            fate[b] = _VIABLE if seen else _DEAD
        dead = dead and fate[b] == _DEAD
    if dead:
        return n_cand
    for k in range(rows.shape[0]):
        j = rows[k]
        base, end = ptr[j], ptr[j + 1]
        b = data[base + last]
        f = fate[b]
        if f == _DEAD or table[g, data[base]] != hub:
            continue
        if f == _VIABLE:
            candidates[n_cand] = ids[j]
            n_cand += 1
            continue
        v = f == _ON_PASSED
        s = table[end_state, b]
        for i in range(base + last + 1, end):
            if not done[s] and materialize(nfa, dfa, s) < 0:
                return NEED_SPACE
            b = data[i]
            if track and (viable[s, b] or (can_pop and accept[s] and follow[b])):
                v = True
            s = table[s, b]
            if s == 0:
                break
        if s != 0:
            _set(allowed, ids[j])
        elif v:
            candidates[n_cand] = ids[j]
            n_cand += 1
    return n_cand


@njit(cache=True, nogil=True)
def _suffix_fates(nfa, dfa, hub, suffixes, can_pop, follow, track, fates):
    """fates[id] for every suffix of the trie `suffixes` read from state hub (never a token's
    first byte): _ALIVE, _VIABLE (died after passing a push or pop point) or _DEAD; rows
    sharing a dead prefix are skipped. 0, or NEED_SPACE. (The byte step is written out here as
    in walk: a shared helper, even inlined, made the walk of a string state 3x slower.)"""
    ids, data, ptr = suffixes.ids, suffixes.data, suffixes.ptr
    lcp, ends_at = suffixes.lcp, suffixes.ends
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    n = ids.shape[0]
    depth = 1
    for j in range(n):
        depth = max(depth, ptr[j + 1] - ptr[j])
    states = np.empty(depth + 1, np.int64)
    passed = np.zeros(depth + 1, np.bool_)
    states[0] = hub
    known = 0
    j = -1
    while j + 1 < n:
        j += 1
        known = min(known, lcp[j])
        base, length = ptr[j], ptr[j + 1] - ptr[j]
        i = known
        s, v = states[i], passed[i]
        while i < length:
            if not done[s] and materialize(nfa, dfa, s) < 0:
                return NEED_SPACE
            b = data[base + i]
            if track and (viable[s, b] or (can_pop and accept[s] and follow[b])):
                v = True
            s = table[s, b]
            if s == 0:
                break
            i += 1
            states[i] = s
            passed[i] = v
        known = i
        if s != 0:
            fates[ids[j]] = _ALIVE
            continue
        fate = _VIABLE if v else _DEAD
        fates[ids[j]] = fate
        if not v:  # the rows sharing the dead prefix die with it
            stop = ends_at[base + i]
            while j + 1 < stop:
                j += 1
                fates[ids[j]] = _DEAD
    return 0
