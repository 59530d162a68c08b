"""The pushdown layer of a compiled grammar in arrays, built by compiled code.

A stack is a frame (a DFA state of lazydfa) over a parent stack, interned to an id; a matcher
state is a set of stacks, interned to an id (0: the empty set, a dead state). From a set, the
closure is every stack reachable without reading (rules pushed, finished frames popped), and a
step reads one byte in every stack of the closure. Closures and steps are made once and kept:
the closures in a flat array, the steps in an open-addressing table keyed by set << 8 | byte,
so that the candidate check of a mask (check_rows) walks tokens through steps it makes itself,
in one compiled call, instead of returning to Python for each new one.

Every kernel returns NEED_SPACE when the DFA arrays are full, PDA_SPACE when these are, and
TOO_DEEP past the nesting limit; the caller grows the arrays and calls again, which is safe
because kernels only add.
"""

from __future__ import annotations

import functools
from collections import namedtuple

import numpy as np

from grammars import fastcall
from grammars.lazydfa import (
    NEED_SPACE,
    find_members,
    hash_members,
    materialize,
    njit,
    pushes,
    sort_in_place,
)
from grammars.lazydfa_arrays import enlarged

PDA_SPACE = -3
TOO_DEEP = -2
EMPTY = -1
UNKNOWN = -(1 << 62)  # _known_step: not stepped yet
# meta slots
_STACKS, _SETS, _SET_MEM, _CL_MEM, _STEPS, _GEN, _DEPTH = range(7)

PDAArrays = namedtuple(
    "PDAArrays",
    "st_g st_parent st_depth st_hkey set_ptr set_mem set_hkey set_hcode cl_start cl_len "
    "cl_complete cl_mem step_keys step_vals mark work buf meta",
)


def new_arrays(max_depth: int, stacks: int = 256, sets: int = 256) -> PDAArrays:
    """Empty arrays with room for `stacks` stacks and `sets` sets: the integer ones views of
    one copy of a template (a compiled call making each took ~22 µs of every compile, most of
    it handing eighteen arrays back to Python; numpy calls one by one ~18, slices of a new
    buffer filled in place ~20)."""
    template, bounds = _template(max_depth, stacks, sets)
    buf = template.copy()
    views = [buf[a:b] for a, b in bounds]
    return PDAArrays(*views[:10], np.zeros(sets, np.bool_), *views[10:])


@functools.lru_cache(maxsize=8)
def _template(max_depth: int, stacks: int, sets: int) -> tuple[np.ndarray, list]:
    """new_arrays' integer fields laid end to end, as a new PDA holds them, and each field's
    (start, stop) in that buffer."""
    sizes = (  # PDAArrays' integer fields in order, and whether they start EMPTY
        (stacks, 0), (stacks, 0), (stacks, 0), (4 * stacks, 1),  # st_g .. st_hkey
        (sets + 1, 0), (4 * sets, 0), (4 * sets, 1), (4 * sets, 0),  # set_ptr .. set_hcode
        (sets, 0), (sets, 1), (4 * sets, 0),  # cl_start, cl_len, cl_mem
        (8 * sets, 1), (8 * sets, 0),  # step_keys, step_vals
        (stacks, 0), (stacks, 0), (stacks, 0), (8, 0),  # mark, work, buf, meta
    )  # fmt: skip
    buf = np.zeros(sum(n for n, _ in sizes), np.int64)
    bounds = []
    at = 0
    for n, empty in sizes:
        if empty:
            buf[at : at + n] = EMPTY
        bounds.append((at, at + n))
        at += n
    meta = buf[bounds[-1][0] :]
    meta[_SETS] = 1  # set 0: the empty set
    meta[_DEPTH] = max_depth
    buf.flags.writeable = False
    return buf, bounds


def grown(pda: PDAArrays) -> PDAArrays:
    """Copies of the arrays, each at least twice as large as it needs to be for what it holds
    (the tables at most a quarter full), so that the call that ran out of room fits."""
    m = pda.meta
    stacks, sets = int(m[_STACKS]), int(m[_SETS])
    st_cap = max(pda.st_g.shape[0], 2 * stacks + 64)
    set_cap = max(pda.cl_len.shape[0], 2 * sets + 64)
    st_table, set_table = _pow2(4 * st_cap), _pow2(4 * set_cap)
    step_table = _pow2(max(pda.step_keys.shape[0], 8 * int(m[_STEPS]) + 64))

    out = PDAArrays(
        st_g=enlarged(pda.st_g, st_cap),
        st_parent=enlarged(pda.st_parent, st_cap),
        st_depth=enlarged(pda.st_depth, st_cap),
        st_hkey=np.full(st_table, EMPTY, np.int64),
        set_ptr=enlarged(pda.set_ptr, set_cap + 1),
        set_mem=enlarged(pda.set_mem, 2 * int(m[_SET_MEM]) + 4 * st_cap),
        set_hkey=np.full(set_table, EMPTY, np.int64),
        set_hcode=np.zeros(set_table, np.int64),
        cl_start=enlarged(pda.cl_start, set_cap),
        cl_len=enlarged(pda.cl_len, set_cap, EMPTY),
        cl_complete=enlarged(pda.cl_complete, set_cap),
        cl_mem=enlarged(pda.cl_mem, 2 * int(m[_CL_MEM]) + 4 * st_cap),
        step_keys=np.full(step_table, EMPTY, np.int64),
        step_vals=np.zeros(step_table, np.int64),
        mark=enlarged(pda.mark, st_cap),
        work=enlarged(pda.work, st_cap),
        buf=enlarged(pda.buf, st_cap),
        meta=m,
    )
    fastcall.call(_rehash, out, pda.step_keys, pda.step_vals)  # the dispatcher typed the
    # arrays' tuple at every call: ~55 µs of a growth's ~120
    return out


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


@njit(cache=True, nogil=True)
def _mix(a, b):
    h = (np.int64(a) * np.int64(-7046029254386353131)) ^ (np.int64(b) + np.int64(0x5BD1E995))
    return h ^ (h >> np.int64(29))


@njit(cache=True, nogil=True)
def _step_slot(keys, key):
    mask = keys.shape[0] - 1
    h = _mix(key, 0) & mask
    while keys[h] != key and keys[h] != EMPTY:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def _rehash(pda, old_keys, old_vals):
    mask = pda.st_hkey.shape[0] - 1
    for s in range(pda.meta[_STACKS]):
        h = _mix(pda.st_g[s], pda.st_parent[s]) & mask
        while pda.st_hkey[h] != EMPTY:
            h = (h + 1) & mask
        pda.st_hkey[h] = s
    mask = pda.set_hkey.shape[0] - 1
    for ss in range(1, pda.meta[_SETS]):
        a = pda.set_ptr[ss]
        code = hash_members(pda.set_mem[a:], pda.set_ptr[ss + 1] - a)
        h = code & mask
        while pda.set_hkey[h] != EMPTY:
            h = (h + 1) & mask
        pda.set_hkey[h] = ss
        pda.set_hcode[h] = code
    for i in range(old_keys.shape[0]):
        if old_keys[i] != EMPTY:
            h = _step_slot(pda.step_keys, old_keys[i])
            pda.step_keys[h] = old_keys[i]
            pda.step_vals[h] = old_vals[i]


@njit(cache=True, nogil=True)
def intern_stack(pda, g, parent):
    """The stack of frame g over `parent` (-1: none), created if new; or PDA_SPACE, TOO_DEEP."""
    mask = pda.st_hkey.shape[0] - 1
    h = _mix(g, parent) & mask
    while pda.st_hkey[h] != EMPTY:
        s = pda.st_hkey[h]
        if pda.st_g[s] == g and pda.st_parent[s] == parent:
            return s
        h = (h + 1) & mask
    n = pda.meta[_STACKS]
    if n >= pda.st_g.shape[0] or 4 * (n + 1) > pda.st_hkey.shape[0]:
        return PDA_SPACE
    depth = 1 + (pda.st_depth[parent] if parent >= 0 else 0)
    if depth > pda.meta[_DEPTH]:
        return TOO_DEEP
    pda.st_g[n] = g
    pda.st_parent[n] = parent
    pda.st_depth[n] = depth
    pda.st_hkey[h] = n
    pda.meta[_STACKS] = n + 1
    return n


@njit(cache=True, nogil=True)
def _sort_unique(buf, k):
    """Sort buf[:k] in place and drop repeats; returns the new count."""
    sort_in_place(buf, k)
    n = 0
    for i in range(k):
        if n == 0 or buf[i] != buf[n - 1]:
            buf[n] = buf[i]
            n += 1
    return n


@njit(cache=True, nogil=True)
def intern_set(pda, members, k):
    """The set of the stacks members[:k] (sorted, distinct), created if new; 0 when empty; or
    PDA_SPACE."""
    if k == 0:
        return 0
    ss, h, code = find_members(pda.set_hkey, pda.set_hcode, pda.set_ptr, pda.set_mem, members, k)
    if ss >= 0:
        return ss
    n = pda.meta[_SETS]
    used = pda.meta[_SET_MEM]
    full = n + 1 >= pda.set_ptr.shape[0] or used + k > pda.set_mem.shape[0]
    if full or 4 * (n + 1) > pda.set_hkey.shape[0]:
        return PDA_SPACE
    for i in range(k):
        pda.set_mem[used + i] = members[i]
    pda.set_ptr[n] = used
    pda.set_ptr[n + 1] = used + k
    pda.set_hkey[h] = n
    pda.set_hcode[h] = code
    pda.meta[_SET_MEM] = used + k
    pda.meta[_SETS] = n + 1
    return n


@njit(cache=True, nogil=True)
def single_of(nfa, dfa, pda, rule_start, sid):
    """The set of stack sid alone."""
    one = np.empty(1, np.int64)
    one[0] = sid
    return intern_set(pda, one, 1)


@njit(cache=True, nogil=True)
def initial_set(nfa, dfa, pda, rule_start, g):
    """The set of the stack holding only state g, with its closure made (closure): the set,
    or an error code (one call where a new grammar made three)."""
    sid = intern_stack(pda, g, -1)
    if sid < 0:
        return sid
    ss = single_of(nfa, dfa, pda, rule_start, sid)
    if ss < 0:
        return ss
    code = closure(nfa, dfa, pda, rule_start, ss)
    return code if code < 0 else ss


@njit(cache=True, nogil=True)
def closure(nfa, dfa, pda, rule_start, ss):
    """Make set ss's closure (cl_start / cl_len / cl_complete: whether the whole grammar can
    end there) unless made; 0, or an error code."""
    if pda.cl_len[ss] >= 0:
        return 0
    gen = pda.meta[_GEN] + 1
    pda.meta[_GEN] = gen
    mark, work, out = pda.mark, pda.work, pda.buf
    top = 0
    for i in range(pda.set_ptr[ss], pda.set_ptr[ss + 1]):
        s = pda.set_mem[i]
        mark[s] = gen
        work[top] = s
        top += 1
    k = 0
    complete = False
    while top:
        top -= 1
        sid = work[top]
        out[k] = sid
        k += 1
        g, parent = pda.st_g[sid], pda.st_parent[sid]
        if dfa.push_count[g] < 0 and pushes(nfa, dfa, g) < 0:
            return NEED_SPACE
        for j in range(dfa.push_start[g], dfa.push_start[g] + dfa.push_count[g]):
            ret = intern_stack(pda, dfa.push_ret[j], parent)
            if ret < 0:
                return ret
            child = intern_stack(pda, rule_start[dfa.push_rule[j]], ret)
            if child < 0:
                return child
            if mark[child] != gen:
                mark[child] = gen
                work[top] = child
                top += 1
        if dfa.accept[g]:
            if parent < 0:
                complete = True
            elif mark[parent] != gen:
                mark[parent] = gen
                work[top] = parent
                top += 1
    used = pda.meta[_CL_MEM]
    if used + k > pda.cl_mem.shape[0]:
        return PDA_SPACE
    pda.cl_mem[used : used + k] = out[:k]
    pda.meta[_CL_MEM] = used + k
    pda.cl_start[ss] = used
    pda.cl_complete[ss] = complete
    pda.cl_len[ss] = k
    return 0


@njit(cache=True, nogil=True, inline="always")
def _known_step(keys, vals, ss, b):
    """step's kept result for (ss, b) (keys, vals: the PDA's step_keys and step_vals), or
    UNKNOWN. The kernels that step byte after byte look here first, with the arrays taken
    once: a call of step reads the tuples' fields, which cost more than the lookup."""
    key = ss << 8 | b
    h = _step_slot(keys, key)
    return vals[h] if keys[h] == key else UNKNOWN


@njit(cache=True, nogil=True)
def step(nfa, dfa, pda, rule_start, ss, b):
    """The set after reading byte b in set ss, made and kept unless known; or an error code."""
    known = _known_step(pda.step_keys, pda.step_vals, ss, b)
    if known != UNKNOWN:
        return known
    key = ss << 8 | b
    if 4 * (pda.meta[_STEPS] + 1) > pda.step_keys.shape[0]:
        return PDA_SPACE
    code = closure(nfa, dfa, pda, rule_start, ss)
    if code < 0:
        return code
    a = pda.cl_start[ss]
    n = pda.cl_len[ss]
    nxt = np.empty(n, np.int64)
    k = 0
    for i in range(a, a + n):
        sid = pda.cl_mem[i]
        g = pda.st_g[sid]
        if not dfa.done[g] and materialize(nfa, dfa, g) < 0:
            return NEED_SPACE
        t = dfa.table[g, b]
        if t:
            s = intern_stack(pda, t, pda.st_parent[sid])
            if s < 0:
                return s
            nxt[k] = s
            k += 1
    k = _sort_unique(nxt, k)
    out = intern_set(pda, nxt, k)
    if out < 0:
        return out
    h = _step_slot(pda.step_keys, key)  # where the lookup above ended: the table did not move
    pda.step_keys[h] = key
    pda.step_vals[h] = out
    pda.meta[_STEPS] += 1
    return out


@njit(cache=True, nogil=True)
def check_rows(nfa, dfa, pda, rule_start, rows, shared, data, ptr, states, found):
    """Walk the trie rows `rows` (sorted; shared[k]: the bytes row k shares with row k - 1)
    from set states[0], each from the set after the bytes it shares with the row before
    (states[d]: the set after d bytes of the row walked last), making the steps on the way;
    a row that dies stops there, and so do the rows after it that share the prefix up to that
    byte. The rows read to the end go to `found`; returns their number, or an error code."""
    stop = 1 << 30  # the length of the prefix at which the row walked last died
    n_found = 0
    keys, vals = pda.step_keys, pda.step_vals
    for k in range(rows.shape[0]):
        common = shared[k]
        if common >= stop:
            continue
        stop = 1 << 30
        top = common + 1
        cur = states[common]
        row = rows[k]
        alive = True
        for i in range(ptr[row] + common, ptr[row + 1]):
            nxt = _known_step(keys, vals, cur, data[i])
            cur = nxt if nxt != UNKNOWN else step(nfa, dfa, pda, rule_start, cur, data[i])
            if cur < 0:
                return cur
            if cur == 0:
                stop, alive = top, False
                break
            states[top] = cur
            top += 1
        if alive:
            found[n_found] = row
            n_found += 1
    return n_found


_PAIRS = 16  # the most stacks check_pops follows by their frames' DFA moves


@njit(cache=True, nogil=True)
def _set_pairs(pda, ss, pg, pp, pn, d):
    """Row d of (pg, pp) := the frames and parents of set ss's stacks; False when too many."""
    a, z = pda.set_ptr[ss], pda.set_ptr[ss + 1]
    if z - a > _PAIRS:
        return False
    for j in range(z - a):
        sid = pda.set_mem[a + j]
        pg[d, j] = pda.st_g[sid]
        pp[d, j] = pda.st_parent[sid]
    pn[d] = z - a
    return True


@njit(cache=True, nogil=True)
def _pairs_set(pda, pg, pp, pn, d, buf):
    """The set of the stacks of row d of (pg, pp), or an error code."""
    for j in range(pn[d]):
        sid = intern_stack(pda, pg[d, j], pp[d, j])
        if sid < 0:
            return sid
        buf[j] = sid
    return intern_set(pda, buf, _sort_unique(buf, pn[d]))


@njit(cache=True, nogil=True)
def set_reads(nfa, dfa, pda, rule_start, ss, row):
    """row[b] := set ss's closure can read byte b; 0, or an error code."""
    code = closure(nfa, dfa, pda, rule_start, ss)
    if code < 0:
        return code
    row[:] = False
    for i in range(pda.cl_start[ss], pda.cl_start[ss] + pda.cl_len[ss]):
        g = pda.st_g[pda.cl_mem[i]]
        if not dfa.done[g] and materialize(nfa, dfa, g) < 0:
            return NEED_SPACE
        for c in range(256):
            if dfa.table[g, c]:
                row[c] = True
    return 0


@njit(cache=True, nogil=True)
def parent_reads(nfa, dfa, pda, rule_start, sid, row):
    """set_reads of the set of stack sid alone."""
    ss = single_of(nfa, dfa, pda, rule_start, sid)
    if ss < 0:
        return ss
    return set_reads(nfa, dfa, pda, rule_start, ss, row)


@njit(cache=True, nogil=True)
def check_pops(nfa, dfa, pda, rule_start, g, below, follow, rows, shared, data, ptr, verdict):
    """The candidate rows of a walk from frame state g (lazydfa_walk.walk) checked where they
    can leave the frame: each row is read by the frame's DFA, and where, past its first byte,
    the frame may end and the frame below read the next byte (`follow`), the rest of the row
    is read from `below` (the set of the stack below alone) too. verdict[k]: 1 when row k
    reads to the end, 0 when it cannot, 2 when it passes a state where a push could continue
    it, or leaves the frame at two places alive at once (to be checked from the whole stack).
    The sets below the frame are the same at every state of the frame, so their steps are made
    once, where the whole stack makes new sets at each new state of the frame (a length
    counter's). Rows are sorted, each resuming from the bytes it shares with the one before
    (shared[k]), as in check_rows. After leaving the frame, a row is read by the DFA moves of
    the frames it reached while none of them pushes or may end (a long string's next block:
    with Llama-3, ~100,000 tokens cross a block's end, each byte a step of sets otherwise),
    by steps of sets from there on. 0, or an error code."""
    table, viable, accept, done = dfa.table, dfa.viable, dfa.accept, dfa.done
    keys, vals = pda.step_keys, pda.step_vals
    depth = 1
    for k in range(rows.shape[0]):
        depth = max(depth, ptr[rows[k] + 1] - ptr[rows[k]])
    # after d bytes of the row walked last: the frame's state, and the stacks that left it
    # (mode 0: none, 1: the set popped[d], 2: the frames and parents in row d of pg / pp)
    frame = np.zeros(depth + 1, np.int64)
    mode = np.zeros(depth + 1, np.int64)
    popped = np.zeros(depth + 1, np.int64)
    pg = np.zeros((depth + 2, _PAIRS), np.int64)
    pp = np.zeros((depth + 2, _PAIRS), np.int64)
    pn = np.zeros(depth + 2, np.int64)
    buf = np.empty(_PAIRS, np.int64)
    ups = np.zeros(8, np.int64)  # parents of those stacks, and the bytes each can read
    reads = np.zeros((8, 256), np.bool_)
    n_up = 0
    frame[0] = g
    stop = 1 << 30  # the bytes after which the row walked last died, or gave up: the rows
    stop_verdict = 0  # sharing them end the same
    for k in range(rows.shape[0]):
        row = rows[k]
        common = shared[k]
        if common >= stop:
            verdict[k] = stop_verdict
            continue
        stop = 1 << 30
        start, end = ptr[row], ptr[row + 1]
        d = common
        out = -1
        while start + d < end:
            s, m, p, b = frame[d], mode[d], popped[d], data[start + d]
            if m == 2:
                # the stacks that left, by their frames' DFA moves while none pushes what reads
                # b or may end where its parent reads b (a stack whose frame neither pushes
                # nor ends is its own closure, so this is `step` without sets)
                n = 0
                slow = False
                for j in range(pn[d]):
                    x = pg[d, j]
                    if not done[x] and materialize(nfa, dfa, x) < 0:
                        return NEED_SPACE
                    if viable[x, b]:
                        slow = True
                        break
                    if accept[x]:
                        up = pp[d, j]
                        i = 0
                        while i < n_up and ups[i] != up:
                            i += 1
                        if i == n_up:
                            if up < 0 or n_up == ups.shape[0]:
                                slow = True
                                break
                            code = parent_reads(nfa, dfa, pda, rule_start, up, reads[i])
                            if code < 0:
                                return code
                            ups[i] = up
                            n_up += 1
                        if reads[i, b]:
                            slow = True
                            break
                    t = table[x, b]
                    if t:
                        pg[d + 1, n] = t
                        pp[d + 1, n] = pp[d, j]
                        n += 1
                pn[d + 1] = n
                if slow:
                    m, p = 1, _pairs_set(pda, pg, pp, pn, d, buf)
                    if p < 0:
                        return p
                elif n == 0:
                    m = 0
            if m == 1:
                nxt = _known_step(keys, vals, p, b)
                p = nxt if nxt != UNKNOWN else step(nfa, dfa, pda, rule_start, p, b)
                if p < 0:
                    return p
                if p == 0:
                    m = 0
            if s and not done[s] and materialize(nfa, dfa, s) < 0:
                return NEED_SPACE
            if s and d and viable[s, b]:
                out = 2
            elif s and d and accept[s] and follow[b]:
                nxt = _known_step(keys, vals, below, b)
                q = nxt if nxt != UNKNOWN else step(nfa, dfa, pda, rule_start, below, b)
                if q < 0:
                    return q
                if q and m == 2:
                    m, p = 1, _pairs_set(pda, pg, pp, pn, d + 1, buf)
                    if p < 0:
                        return p
                if q and m and q != p:
                    out = 2
                elif q and not m:
                    m, p = (2, 0) if _set_pairs(pda, q, pg, pp, pn, d + 1) else (1, q)
            if out == 2:
                break
            s = table[s, b] if s else 0
            if s == 0 and m == 0:
                out = 0
                break
            d += 1
            frame[d], mode[d], popped[d] = s, m, p
        if out >= 0:
            stop, stop_verdict = d + 1, out
        verdict[k] = 1 if out == -1 else out
    return 0


@njit(cache=True, nogil=True)
def walk(nfa, dfa, pda, rule_start, ss, data):
    """The set after reading the bytes of `data` from set ss (0: dead), or an error code."""
    keys, vals = pda.step_keys, pda.step_vals
    for i in range(data.shape[0]):
        nxt = _known_step(keys, vals, ss, data[i])
        ss = nxt if nxt != UNKNOWN else step(nfa, dfa, pda, rule_start, ss, data[i])
        if ss <= 0:
            return ss
    return ss
