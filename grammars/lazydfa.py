"""The lazily determinised automaton of a grammar, kept in arrays and built by compiled code.

The NFA of all rules is frozen into arrays once (eps edges, byte edges, rule-reference edges);
a DFA state is the sorted set of its "important" NFA states (those with a byte edge, a rule
reference or a rule end), interned through an open-addressing hash table. A state is created
when first reached and materialised (its 256-entry row, its pushes, the bytes that make a push
worth following) when first read, so the token walk that computes masks builds the states it
needs without leaving compiled code. Every kernel returns NEED_SPACE when an array is full; the
caller grows the arrays and repeats the call, which is safe because every kernel only adds.
lazydfa_arrays.py builds the arrays (freezing the NFA, allocating and growing the DFA).

numba compiles the kernels (cached on disk); `RADIXGEN_NO_JIT=1` runs them as plain Python.
"""

from __future__ import annotations

import os
from collections import namedtuple

import numpy as np

try:
    if os.environ.get("RADIXGEN_NO_JIT"):
        raise ImportError("disabled by RADIXGEN_NO_JIT")
    from numba import njit
except ImportError:  # numba is a dependency; plain Python keeps the module usable without it

    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda f: f)


NEED_SPACE = -1
EDGE_ROOM = 64  # byte moves of a state that materialize's scratch arrays (NFAArrays) hold
# meta slots
_STATES, _MEM, _PUSHES, _GEN, _WANT = range(5)

NFAArrays = namedtuple(
    "NFAArrays",
    "eps_ptr eps_idx important final e_ptr e_byte e_mask e_tgt masks nt_ptr nt_rule nt_tgt "
    "first mark stack buf pairs edge_bits edge_tgts classes",
)
DFAArrays = namedtuple(
    "DFAArrays",
    "table viable accept done m_ptr mem hkey hcode push_start push_count push_rule push_ret meta",
)


# the index of a 64-bit word's only set bit b: _LOW_BIT[(b * _DE_BRUIJN) >> 58] (a de Bruijn
# sequence: each 6-bit window of it appears once)
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_LOW_BIT = np.zeros(64, np.int64)
for _i in range(64):
    _LOW_BIT[((1 << _i) * 0x03F79D71B4CB0A89 & (1 << 64) - 1) >> 58] = _i


# -- kernels ------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _closure(nfa, seeds, n_seeds):
    """Important states reachable from seeds[:n_seeds] by eps moves, sorted, into nfa.buf;
    returns their count."""
    mark, stack = nfa.mark, nfa.stack
    stamp = _new_stamp(mark)
    top = 0
    for i in range(n_seeds):
        top = _push_new(mark, stack, seeds[i], stamp, top)
    return _close(mark, stack, nfa.buf, nfa.important, nfa.eps_ptr, nfa.eps_idx, top, stamp)


@njit(cache=True, nogil=True, inline="always")
def _new_stamp(mark):
    """A stamp no state is marked with yet (the last slot of mark holds the current one)."""
    mark[-1] += 1
    return mark[-1]


@njit(cache=True, nogil=True, inline="always")
def _push_new(mark, stack, x, stamp, top):
    """Push state x on stack[:top] unless marked with stamp; the new top."""
    if mark[x] != stamp:
        mark[x] = stamp
        stack[top] = x
        top += 1
    return top


@njit(cache=True, nogil=True, inline="always")
def _close(mark, stack, out, important, eps_ptr, eps_idx, top, stamp):
    """_closure of the states on stack[:top] (marked with stamp), into out; their number.
    Arrays rather than the NFA's tuple, taken once by the caller: materialize calls this for
    each byte class of a new state, and reading them from the tuple at each call cost more
    than the walk (~0.2 µs; ~1.5 µs a state on big objects)."""
    k = 0
    while top:
        top -= 1
        x = stack[top]
        if important[x]:
            out[k] = x
            k += 1
        for j in range(eps_ptr[x], eps_ptr[x + 1]):
            y = eps_idx[j]
            if mark[y] != stamp:
                mark[y] = stamp
                stack[top] = y
                top += 1
    sort_in_place(out, k)
    return k


@njit(cache=True, nogil=True, inline="always")
def sort_in_place(buf, k):
    """Sort buf[:k]."""
    if k > 16:
        buf[:k].sort()  # in place: np.sort allocated a copy at every call
    else:  # few members: an insertion sort
        for i in range(1, k):
            x, j = buf[i], i - 1
            while j >= 0 and buf[j] > x:
                buf[j + 1] = buf[j]
                j -= 1
            buf[j + 1] = x


@njit(cache=True, nogil=True, inline="always")
def hash_members(members, k):
    h = np.int64(1469598103934665603)
    for i in range(k):
        h = (h ^ np.int64(members[i])) * np.int64(1099511628211)
    return h


@njit(cache=True, nogil=True, inline="always")
def find_members(hkey, hcode, ptr, mem, members, k):
    """In an interning table (hkey: ids by slot, -1 empty; hcode: their hashes; the members of
    id s are mem[ptr[s]:ptr[s + 1]]): (the id whose members are members[:k], or -1; the slot
    where the search ended; the hash of the members)."""
    h = hash_members(members, k)
    size = hkey.shape[0]
    slot = h & (size - 1)
    while hkey[slot] >= 0:
        s = hkey[slot]
        if hcode[slot] == h:
            a = ptr[s]
            if ptr[s + 1] - a == k:
                same = True
                for i in range(k):
                    if mem[a + i] != members[i]:
                        same = False
                        break
                if same:
                    return s, slot, h
        slot = (slot + 1) & (size - 1)
    return -1, slot, h


@njit(cache=True, nogil=True, inline="always")
def _intern(nfa, dfa, k):
    """The state whose members are nfa.buf[:k] (0 when empty), created if new."""
    if k == 0:
        return 0
    s, slot, h = find_members(dfa.hkey, dfa.hcode, dfa.m_ptr, dfa.mem, nfa.buf, k)
    return s if s >= 0 else _add_state(nfa, dfa, k, slot, h)


@njit(cache=True, nogil=True)
def _add_state(nfa, dfa, k, slot, h):
    """A new state whose members are nfa.buf[:k], at `slot` of the interning table (h: their
    hash); NEED_SPACE when the arrays are full."""
    members = nfa.buf
    n = dfa.meta[_STATES]
    used = dfa.meta[_MEM]
    if (
        n + 1 >= dfa.accept.shape[0]
        or used + k > dfa.mem.shape[0]
        or 2 * (n + 1) > dfa.hkey.shape[0]
    ):
        dfa.meta[_WANT] = k
        return NEED_SPACE
    accept = False
    for i in range(k):
        dfa.mem[used + i] = members[i]
        if nfa.final[members[i]]:
            accept = True
    dfa.m_ptr[n + 1] = used + k
    dfa.meta[_MEM] = used + k
    dfa.accept[n] = accept
    dfa.done[n] = False
    dfa.push_count[n] = -1
    dfa.hkey[slot] = n
    dfa.hcode[slot] = h
    dfa.meta[_STATES] = n + 1
    return n


@njit(cache=True, nogil=True)
def pushes(nfa, dfa, g):
    """Compute, once, the rules state g can push and the state each returns to. (The loop over
    the members takes its arrays from the tuples once, as materialize does: reading a tuple's
    field inside a loop cost as much as the work; the closure and interning of each of the
    few rules read theirs.)"""
    if dfa.push_count[g] >= 0:
        return 0
    pairs, mem, nt_ptr, nt_rule, nt_tgt = nfa.pairs, dfa.mem, nfa.nt_ptr, nfa.nt_rule, nfa.nt_tgt
    n = 0
    for i in range(dfa.m_ptr[g], dfa.m_ptr[g + 1]):
        x = mem[i]
        for j in range(nt_ptr[x], nt_ptr[x + 1]):
            pairs[n, 0] = nt_rule[j]
            pairs[n, 1] = nt_tgt[j]
            n += 1
    start = dfa.meta[_PUSHES]
    push_rule, push_ret = dfa.push_rule, dfa.push_ret
    if start + n > push_rule.shape[0]:
        dfa.meta[_WANT] = n
        return NEED_SPACE
    count = 0
    if n:
        order = np.argsort(pairs[:n, 0], kind="mergesort")
        mark, stack = nfa.mark, nfa.stack
        i = 0
        while i < n:
            rule = pairs[order[i], 0]
            stamp = _new_stamp(mark)
            top = 0
            while i < n and pairs[order[i], 0] == rule:
                top = _push_new(mark, stack, pairs[order[i], 1], stamp, top)
                i += 1
            k = _close(mark, stack, nfa.buf, nfa.important, nfa.eps_ptr, nfa.eps_idx, top, stamp)
            ret = _intern(nfa, dfa, k)
            if ret < 0:
                return NEED_SPACE
            push_rule[start + count] = rule
            push_ret[start + count] = ret
            count += 1
    dfa.push_start[g] = start
    dfa.push_count[g] = count
    dfa.meta[_PUSHES] = start + count
    return 0


@njit(cache=True, nogil=True, inline="always")
def move_word(e_byte, e_mask, masks, j, w):
    """Word w (bytes 64w .. 64w + 63, a bit each) of the bytes NFA byte move j reads: its one
    byte, or its row of `masks` (nfa_layout.mask_columns)."""
    b = e_byte[j]
    if b < 0:
        return masks[e_mask[j], w]
    return np.uint64(1) << np.uint64(b & 63) if b >> 6 == w else np.uint64(0)


@njit(cache=True, nogil=True, inline="always")
def _low_bit(x):
    """The index of the lowest set bit of x (uint64, not 0)."""
    return _LOW_BIT[((x & (~x + np.uint64(1))) * _DE_BRUIJN) >> np.uint64(58)]


@njit(cache=True, nogil=True)
def _split_classes(bits, n_edges, cls):
    """The bytes read by the same edges (bits[e]: edge e's bytes as 4 words) as classes,
    cls[c] their bytes; returns the number of classes (bytes no edge reads are in none)."""
    n_cls = 0
    for e in range(n_edges):
        r0, r1, r2, r3 = bits[e, 0], bits[e, 1], bits[e, 2], bits[e, 3]  # not in a class yet
        for c in range(n_cls):  # those made by this edge are inside it: not split again
            c0, c1, c2, c3 = cls[c, 0], cls[c, 1], cls[c, 2], cls[c, 3]
            i0, i1, i2, i3 = c0 & bits[e, 0], c1 & bits[e, 1], c2 & bits[e, 2], c3 & bits[e, 3]
            if not (i0 | i1 | i2 | i3):
                continue
            r0, r1, r2, r3 = r0 & ~c0, r1 & ~c1, r2 & ~c2, r3 & ~c3
            if i0 == c0 and i1 == c1 and i2 == c2 and i3 == c3:
                continue
            cls[c, 0], cls[c, 1], cls[c, 2], cls[c, 3] = c0 ^ i0, c1 ^ i1, c2 ^ i2, c3 ^ i3
            cls[n_cls, 0], cls[n_cls, 1], cls[n_cls, 2], cls[n_cls, 3] = i0, i1, i2, i3
            n_cls += 1
        if r0 | r1 | r2 | r3:
            cls[n_cls, 0], cls[n_cls, 1], cls[n_cls, 2], cls[n_cls, 3] = r0, r1, r2, r3
            n_cls += 1
    return n_cls


@njit(cache=True, nogil=True)
def materialize(nfa, dfa, g):
    """Fill state g's row, pushes and viable bytes; 0, or NEED_SPACE."""
    if dfa.done[g]:
        return 0
    if pushes(nfa, dfa, g) < 0:
        return NEED_SPACE
    viable, table, mem, first = dfa.viable, dfa.table, dfa.mem, nfa.first
    e_ptr, e_byte, e_mask, masks = nfa.e_ptr, nfa.e_byte, nfa.e_mask, nfa.masks
    push_rule, start = dfa.push_rule, dfa.push_start[g]
    viable[g, :] = False  # rows come uninitialised (lazydfa_arrays.grown)
    for j in range(start, start + dfa.push_count[g]):
        rule = push_rule[j]
        for b in range(256):
            if first[rule, b]:
                viable[g, b] = True
    # the byte edges of the members, each as the bits of its bytes (4 words); the bytes read
    # by the same edges form one class, found by splitting the classes by each edge in turn
    # (few edges a state: this took ~0.4 µs less than rows of edge bits for all 256 bytes)
    a, z = dfa.m_ptr[g], dfa.m_ptr[g + 1]
    n_edges = 0
    for i in range(a, z):
        x = mem[i]
        n_edges += e_ptr[x + 1] - e_ptr[x]
    table[g, :] = 0
    if n_edges:
        # in the grammar's scratch arrays (allocations were an eighth of the work), or in
        # arrays of its own for a state of more edges than they hold
        bits, tgts, cls = nfa.edge_bits, nfa.edge_tgts, nfa.classes
        if n_edges > tgts.shape[0]:
            bits = np.empty((n_edges, 4), np.uint64)
            tgts = np.empty(n_edges, np.int64)
        e_tgt = nfa.e_tgt
        e = 0
        for i in range(a, z):
            x = mem[i]
            for j in range(e_ptr[x], e_ptr[x + 1]):
                tgts[e] = e_tgt[j]
                for w in range(4):
                    bits[e, w] = move_word(e_byte, e_mask, masks, j, w)
                e += 1
        n_cls = _split_classes(bits, n_edges, cls)  # cls[c]: the bytes of class c
        mark, stack, buf, important = nfa.mark, nfa.stack, nfa.buf, nfa.important
        eps_ptr, eps_idx = nfa.eps_ptr, nfa.eps_idx
        hkey, hcode, m_ptr = dfa.hkey, dfa.hcode, dfa.m_ptr
        for c in range(n_cls):
            w = 0
            while not cls[c, w]:
                w += 1
            r = (w << 6) + _low_bit(cls[c, w])  # a byte of the class
            stamp = _new_stamp(mark)
            top = 0
            for e in range(n_edges):
                if bits[e, r >> 6] >> np.uint64(r & 63) & np.uint64(1):
                    top = _push_new(mark, stack, tgts[e], stamp, top)
            k = _close(mark, stack, buf, important, eps_ptr, eps_idx, top, stamp)
            if not k:
                continue
            t, slot, h = find_members(hkey, hcode, m_ptr, mem, buf, k)
            if t < 0:
                t = _add_state(nfa, dfa, k, slot, h)
                if t < 0:
                    return NEED_SPACE  # (the row is written whole again on the next call)
            for w in range(4):
                x = cls[c, w]
                while x:
                    table[g, (w << 6) + _low_bit(x)] = t
                    x &= x - np.uint64(1)  # the lowest bit cleared
    dfa.done[g] = True
    return 0


@njit(cache=True, nogil=True)
def intern_starts(nfa, dfa, starts, out):
    """out[r] = the state of the closure of starts[r], for every r; 0, or NEED_SPACE."""
    for r in range(starts.shape[0]):
        g = _intern(nfa, dfa, _closure(nfa, starts[r : r + 1], 1))
        if g < 0:
            return NEED_SPACE
        out[r] = g
    return 0


@njit(cache=True, nogil=True)
def chain_exits(data, ptr, in_mask):
    """For each row: the first position after the first byte whose byte is not in the mask
    (the row's length when there is none)."""
    n = ptr.shape[0] - 1
    out = np.empty(n, np.int64)
    for j in range(n):
        k = ptr[j] + 1
        while k < ptr[j + 1] and in_mask[data[k]]:
            k += 1
        out[j] = k - ptr[j]
    return out


@njit(cache=True, nogil=True)
def subtree_ends(ptr, lcp):
    """TokenTrie.ends: each row opens a node per byte past the prefix it shares with the row
    before; a row sharing only L bytes closes the open nodes deeper than L."""
    n = ptr.shape[0] - 1
    ends = np.full(max(ptr[n], 1), n, np.int64)
    open_at = np.empty(max(ptr[n], 1), np.int64)  # data positions of the open nodes, by depth
    top = 0
    for k in range(n):
        while top > lcp[k]:
            top -= 1
            ends[open_at[top]] = k
        for i in range(ptr[k] + top, ptr[k + 1]):
            open_at[top] = i
            top += 1
    return ends


@njit(cache=True, nogil=True)
def shared_prefixes(data, ptr, rows):
    """For a subsequence `rows` of a trie's rows (data[ptr[j]:ptr[j + 1]] each): the bytes
    each shares with the one before, compared directly (the trie's lcp over the rows between
    would scan up to the whole vocabulary when the rows are few and far apart)."""
    out = np.zeros(rows.shape[0], np.int64)
    for k in range(1, rows.shape[0]):
        a, b = ptr[rows[k - 1]], ptr[rows[k]]
        n = min(ptr[rows[k - 1] + 1] - a, ptr[rows[k] + 1] - b)
        m = 0
        while m < n and data[a + m] == data[b + m]:
            m += 1
        out[k] = m
    return out


@njit(cache=True, nogil=True)
def sorted_rows(row_of, ids, data, ptr):
    """The trie rows of token `ids` (row_of: each token's row) in trie order, and the bytes
    each shares with the one before (shared_prefixes)."""
    rows = np.sort(row_of[ids])
    return rows, shared_prefixes(data, ptr, rows)


@njit(cache=True, nogil=True)
def utf8_tail(lead):
    """(continuation bytes a well-formed UTF-8 sequence starting with `lead` needs, low and high
    bound of the first of them); (0, 0, 0) for a byte that cannot start one."""
    if 0xC2 <= lead <= 0xDF:
        return 1, 0x80, 0xBF
    if lead == 0xE0:
        return 2, 0xA0, 0xBF
    if 0xE1 <= lead <= 0xEF:
        return 2, 0x80, (0x9F if lead == 0xED else 0xBF)
    if lead == 0xF0:
        return 3, 0x90, 0xBF
    if 0xF1 <= lead <= 0xF4:
        return 3, 0x80, (0x8F if lead == 0xF4 else 0xBF)
    return 0, 0, 0


@njit(cache=True, nogil=True)
def chain_stays(data, ptr, in_mask, utf8):
    """For each row: it reads only bytes of the mask (and, with utf8, well-formed multi-byte
    UTF-8 characters, the last one possibly cut short)."""
    n = ptr.shape[0] - 1
    out = np.zeros(n, np.bool_)
    for j in range(n):
        k, end = ptr[j], ptr[j + 1]
        ok = True
        while k < end and ok:
            b = data[k]
            k += 1
            if in_mask[b]:
                continue
            need, lo, hi = utf8_tail(b) if utf8 else (0, 0, 0)
            if need == 0:
                ok = False
            while need and k < end:
                if not lo <= data[k] <= hi:
                    ok = False
                    break
                k += 1
                need -= 1
                lo, hi = 0x80, 0xBF
        out[j] = ok
    return out


@njit(cache=True, nogil=True)
def utf8_target(nfa, dfa, src, can_pop):
    """The one state every well-formed multi-byte UTF-8 character read from state src leads
    to, through states that send all the bytes each next position allows to one same state,
    with no push or pop on the way; 0 when there is no such state; or NEED_SPACE."""
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    if not done[src] and materialize(nfa, dfa, src) < 0:
        return NEED_SPACE
    target = 0
    for lead in range(0xC2, 0xF5):
        need, lo, hi = utf8_tail(lead)
        if viable[src, lead] or table[src, lead] == 0:
            return 0
        s = table[src, lead]
        while need:
            if not done[s] and materialize(nfa, dfa, s) < 0:
                return NEED_SPACE
            if can_pop and accept[s]:
                return 0
            t = table[s, lo]
            for c in range(lo, hi + 1):
                if table[s, c] != t or viable[s, c]:
                    return 0
            if t == 0:
                return 0
            s = t
            need -= 1
            lo, hi = 0x80, 0xBF
        if target and s != target:
            return 0
        target = s
    return target


@njit(cache=True, nogil=True)
def rehash(dfa):
    dfa.hkey[:] = -1
    size = dfa.hkey.shape[0]
    for s in range(1, dfa.meta[_STATES]):
        a = dfa.m_ptr[s]
        h = hash_members(dfa.mem[a:], dfa.m_ptr[s + 1] - a)
        slot = h & (size - 1)
        while dfa.hkey[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        dfa.hkey[slot] = s
        dfa.hcode[slot] = h
