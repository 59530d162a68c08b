"""The chain a token walk may jump along (see lazydfa_walk.walk), found by one compiled call: the
state most of a frame's first bytes lead to (the hub), the bytes on which the hub moves on to
one same state, whether that is a loop, and whether multi-byte UTF-8 characters stay in it
(a loop) or take one step along it each (a counter of characters)."""

from __future__ import annotations

import numpy as np

from grammars.lazydfa import (
    NEED_SPACE,
    _close,
    _closure,
    _intern,
    _new_stamp,
    _push_new,
    materialize,
    move_word,
    njit,
    utf8_tail,
    utf8_target,
)

MIN_CHAIN_BYTES = 16  # a chain of states worth jumping through in token walks
_FEW_TARGETS = 32  # the states a row leads to that _most_common_target counts one by one
# the states of a chain checked to take multi-byte characters as one step each: 97.5% of
# Llama-3's tokens holding such characters have at most 8 characters; the check builds the
# states inside those characters, ~9 a step
CHAR_STEPS = 8
HUB, UTF8, UTF8_FROM_G, LENGTH, CHARS = range(5)  # the slots of chain_info's `out`


@njit(cache=True, nogil=True)
def _most_common_target(table, s):
    """The state most bytes of s lead to (the first such by byte order on a tie), when that
    takes at least MIN_CHAIN_BYTES bytes; else 0. The targets are counted in order of their
    first byte (rows lead to a few states: ~5x quicker than sorting the row), and sorted
    where a row leads to more than _FEW_TARGETS."""
    row = table[s]
    seen = np.empty(_FEW_TARGETS, np.int64)
    counts = np.zeros(_FEW_TARGETS, np.int64)
    k = 0
    for b in range(256):
        t = row[b]
        if t == 0:
            continue
        i = 0
        while i < k and seen[i] != t:
            i += 1
        if i == k:
            if k == _FEW_TARGETS:
                return _most_common_by_sorting(row)
            seen[k] = t
            k += 1
        counts[i] += 1
    best, best_n = 0, 0
    for i in range(k):  # the first of the most counted: the first by byte order
        if counts[i] > best_n:
            best, best_n = seen[i], counts[i]
    return best if best_n >= MIN_CHAIN_BYTES else 0


@njit(cache=True, nogil=True)
def _most_common_by_sorting(row):
    """_most_common_target of a row leading to many states."""
    targets = np.sort(row[row != 0])
    if targets.shape[0] < MIN_CHAIN_BYTES:
        return 0
    best, best_n, run = 0, 0, 0
    for i in range(targets.shape[0]):
        run = run + 1 if i and targets[i] == targets[i - 1] else 1
        if i + 1 == targets.shape[0] or targets[i + 1] != targets[i]:
            t = targets[i]
            if run > best_n or (run == best_n and _first_byte(row, t) < _first_byte(row, best)):
                best, best_n = t, run
    return best if best_n >= MIN_CHAIN_BYTES else 0


@njit(cache=True, nogil=True)
def _first_byte(row, t):
    for b in range(256):
        if row[b] == t:
            return b
    return 256


@njit(cache=True, nogil=True)
def _utf8_step(nfa, dfa, s, can_pop, memo):
    """utf8_target of state s, kept in memo[s, can_pop] (0: not known yet, -1: none) while s
    is within the memo."""
    known = s < memo.shape[0]
    if known and memo[s, can_pop]:
        return max(memo[s, can_pop], 0)
    target = _utf8_target_by_moves(nfa, dfa, s)
    if target == _BY_ROWS:
        target = utf8_target(nfa, dfa, s, can_pop)
    if known and target != NEED_SPACE:
        memo[s, can_pop] = target if target else -1
    return target


_BY_ROWS = -2  # the answer needs the states' rows: build them (materialize)


@njit(cache=True, nogil=True)
def _mask_target(nfa, dfa, s, words):
    """The state every byte of a mask (`words`: four 64-bit words) leads to from state s, from
    its members' moves without building its row (a chain's states: each counter position's
    row would add ~9 states inside characters): 0 when none leads anywhere; _BY_ROWS where a
    move reads some of the mask's bytes and not others or a member refers to a rule (the row
    answers), or NEED_SPACE."""
    mark, stack = nfa.mark, nfa.stack
    stamp = _new_stamp(mark)
    top = 0
    for i in range(dfa.m_ptr[s], dfa.m_ptr[s + 1]):
        x = dfa.mem[i]
        if nfa.nt_ptr[x + 1] > nfa.nt_ptr[x]:
            return _BY_ROWS
        for j in range(nfa.e_ptr[x], nfa.e_ptr[x + 1]):
            some, every = False, True
            for w in range(4):
                read = move_word(nfa.e_byte, nfa.e_mask, nfa.masks, j, w) & words[w]
                some = some or read != 0
                every = every and read == words[w]
            if not some:
                continue
            if not every:
                return _BY_ROWS
            top = _push_new(mark, stack, nfa.e_tgt[j], stamp, top)
    if not top:
        return 0
    k = _close(mark, stack, nfa.buf, nfa.important, nfa.eps_ptr, nfa.eps_idx, top, stamp)
    return _intern(nfa, dfa, k)


@njit(cache=True, nogil=True)
def _one_edge(nfa, x, lo, hi):
    """The one byte move of NFA state x that reads every byte of lo..hi (within one 64-byte
    word), when no other move of x reads any of them and x has no empty move or rule
    reference and ends no rule; else -1."""
    if nfa.eps_ptr[x + 1] > nfa.eps_ptr[x] or nfa.nt_ptr[x + 1] > nfa.nt_ptr[x] or nfa.final[x]:
        return -1
    w = lo >> 6
    span = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(63 - (hi - lo))  # hi - lo + 1 low bits
    want = span << np.uint64(lo & 63)
    found = -1
    for j in range(nfa.e_ptr[x], nfa.e_ptr[x + 1]):
        reads = move_word(nfa.e_byte, nfa.e_mask, nfa.masks, j, w) & want
        if reads == want and found < 0:
            found = j
        elif reads:
            return -1
    return found


@njit(cache=True, nogil=True)
def _lead_move(nfa, dfa, s, lead):
    """The one byte move of a member of state s that reads byte `lead`: -1 when none does;
    _BY_ROWS when several do or a member refers to a rule."""
    bit = np.uint64(1) << np.uint64(lead & 63)
    found = -1
    for i in range(dfa.m_ptr[s], dfa.m_ptr[s + 1]):
        x = dfa.mem[i]
        if nfa.nt_ptr[x + 1] > nfa.nt_ptr[x]:
            return _BY_ROWS
        for j in range(nfa.e_ptr[x], nfa.e_ptr[x + 1]):
            if move_word(nfa.e_byte, nfa.e_mask, nfa.masks, j, lead >> 6) & bit:
                if found >= 0:
                    return _BY_ROWS
                found = j
    return found


@njit(cache=True, nogil=True)
def _utf8_target_by_moves(nfa, dfa, src):
    """utf8_target of state src read from the NFA's moves, without building the states inside
    the characters, where each step inside one is a single NFA state (no empty move, rule
    reference or end of rule; one move of the state before reads every byte the character
    allows there, and no other move any of them), as in a character class or an embedded
    DFA's copy: a string's body met at every new property or item of a large object, a length
    counter's positions. Else _BY_ROWS (utf8_target's way), or NEED_SPACE."""
    target, last = 0, -1
    for lead in range(0xC2, 0xF5):
        j = _lead_move(nfa, dfa, src, lead)
        if j < 0:
            return 0 if j == -1 else _BY_ROWS  # (no move: the row has no target there)
        y = nfa.e_tgt[j]
        need, lo, hi = utf8_tail(lead)
        while need:
            j = _one_edge(nfa, y, lo, hi)
            if j < 0:
                return _BY_ROWS
            y = nfa.e_tgt[j]
            need -= 1
            lo, hi = 0x80, 0xBF
        if y != last:  # the state after the character: the closure of y (move j's target)
            s = _intern(nfa, dfa, _closure(nfa, nfa.e_tgt[j : j + 1], 1))
            if s == NEED_SPACE:
                return NEED_SPACE
            if not s or (target and s != target):
                return 0
            target, last = s, y
    return target


@njit(cache=True, nogil=True)
def pops_on_chain(can_pop, follow, in_chain):
    """A pop where the chain's frame may end can be followed, in the frame below, by a byte of
    the chain or of a multi-byte character (`follow`: the bytes it can read): only then does
    the chain stop at a final state (extend_chain). A string's length counter that
    may end anywhere is followed by its closing quote, which is not on the chain."""
    if not can_pop:
        return False
    for b in range(256):  # noqa: SIM110 - a loop numba compiles
        if follow[b] and (in_chain[b] or b >= 0x80):
            return True
    return False


@njit(cache=True, nogil=True)
def chain_info(nfa, dfa, g, can_pop, depth, out, in_chain, memo, follow, chain, chain_memo):
    """Fill out[HUB, UTF8, UTF8_FROM_G, LENGTH, CHARS] and in_chain (the bytes on which the
    hub moves on to one same state; all False without a hub) for frame state g; 0, or
    NEED_SPACE. The UTF-8 slots are set only where the chain is a loop (the hub moves on to
    itself); LENGTH, the states of the chain up to `depth`, only where it is not, and CHARS,
    the first states of that chain (from g, at most CHAR_STEPS) from which every multi-byte
    UTF-8 character leads to the chain's next state, as a byte of in_chain does (a counter of
    characters). `memo`: the states' utf8_target, kept between calls (_utf8_step);
    `follow`: as for pops_on_chain; `chain` (depth + 1 slots): the chain where it is not a
    loop (extend_chain's, chain[0] = 0 otherwise), for the walk to go on with;
    `chain_memo`: extend_chain's."""
    out[:] = 0
    in_chain[:] = False
    chain[0] = 0
    table = dfa.table
    if not dfa.done[g] and materialize(nfa, dfa, g) < 0:
        return NEED_SPACE
    hub = _most_common_target(table, g)
    if not hub:
        return 0
    if not dfa.done[hub] and materialize(nfa, dfa, hub) < 0:
        return NEED_SPACE
    nxt = _most_common_target(table, hub)
    if not nxt:
        return 0
    for b in range(256):
        in_chain[b] = table[hub, b] == nxt
    out[HUB] = hub
    if nxt != hub:
        chain[0], chain[1] = 1, hub
        pops = pops_on_chain(can_pop, follow, in_chain)
        if (
            extend_chain(nfa, dfa, chain, np.zeros(1, np.bool_), in_chain, pops, depth, chain_memo)
            < 0
        ):
            return NEED_SPACE
        out[LENGTH] = chain[0]
        prev = g
        for d in range(1, min(chain[0], CHAR_STEPS) + 1):
            target = _utf8_step(nfa, dfa, prev, int(can_pop), memo)
            if target == NEED_SPACE:
                return NEED_SPACE
            if target != chain[d]:
                break
            out[CHARS] = d
            prev = chain[d]
        return 0
    # the loop's hub is met again at every new state leading to it (a key's or a string's
    # loop): its target is kept in memo, as g's is (~10 µs a call with 51 lead bytes)
    target = _utf8_step(nfa, dfa, hub, int(can_pop), memo)
    if target < 0:
        return NEED_SPACE
    out[UTF8] = closed = int(target == hub)
    if closed:
        same = True  # g's lead bytes go where the hub's do: so do their characters
        for lead in range(0xC2, 0xF5):
            if table[g, lead] != table[hub, lead] or dfa.viable[g, lead]:
                same = False
                break
        target = hub if same else _utf8_step(nfa, dfa, g, int(can_pop), memo)
        if target < 0:
            return NEED_SPACE
        out[UTF8_FROM_G] = int(target == hub)
    return 0


@njit(cache=True, nogil=True)
def extend_chain(nfa, dfa, chain, ends, in_chain, can_pop, to, memo):
    """Extend chain (chain[d] = the state after d bytes of the chain mask, chain[0] = its
    length) up to `to` bytes, stopping for good where a state does not send every byte of the
    mask to one state, could push or pop, or dies (a state not built yet is stepped by
    _mask_target where its moves allow). Returns 0, or NEED_SPACE. `memo[s]`, while
    s is within it: 2 + the state s sends the mask to (1: none; 0: not known), then the mask
    as four words of bits, kept between calls (a string's length counter extends a chain as
    long as the longest token at each new position, reading 256 bytes of each state: ~130 µs
    a call with a 128-byte token)."""
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    words = np.zeros(4, np.int64)
    for b in range(256):
        if in_chain[b]:
            words[b >> 6] |= np.int64(1) << np.int64(b & 63)
    bits = words.view(np.uint64)
    while chain[0] < to and not ends[0]:
        d = chain[0]
        s = chain[d]
        known = s < memo.shape[0]
        if (
            known
            and memo[s, 0]
            and memo[s, 1] == words[0]
            and memo[s, 2] == words[1]
            and memo[s, 3] == words[2]
            and memo[s, 4] == words[3]
        ):
            u = memo[s, 0] - 2
        else:
            u = _BY_ROWS if done[s] else _mask_target(nfa, dfa, s, bits)
            if u == NEED_SPACE:
                return NEED_SPACE
            if u == _BY_ROWS:
                if not done[s] and materialize(nfa, dfa, s) < 0:
                    return NEED_SPACE
                u = -1
                for b in range(256):
                    if in_chain[b]:
                        if u == -1:
                            u = table[s, b]
                        if table[s, b] != u or viable[s, b]:
                            u = 0
                            break
            if known:
                memo[s, 0] = u + 2
                memo[s, 1:] = words
        if u <= 0 or (can_pop and accept[s]):
            ends[0] = True
            break
        if u == s:  # a loop: the chain stays on it
            for k in range(d + 1, chain.shape[0]):
                chain[k] = s
            chain[0] = chain.shape[0] - 1
            ends[0] = True
            break
        chain[d + 1] = u
        chain[0] = d + 1
    return 0
