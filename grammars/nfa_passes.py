"""Passes over the NFA of a whole grammar, in arrays (lazydfa_arrays.NFAGraph), before it is
frozen for the lazy DFA (grammar.Machine), in one compiled call: prune what cannot finish,
refuse left recursion, find the bytes that can start each rule, and lay out the arrays the lazy
DFA's kernels read.

`starts[r]` and `finals[r]` are the NFA states where rule r begins and ends; rule references
are the graph's nt edges (source state, rule, target state).
"""

from __future__ import annotations

import numpy as np

from grammars import boxes, fastcall, lazydfa_arrays, nfa_layout
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.lazydfa import EDGE_ROOM, njit


@njit(cache=True, nogil=True, inline="always")
def _found(live, todo, top, s):
    """Mark state s live and queue it unless it is already: the new queue length."""
    if live[s]:
        return top
    live[s] = True
    todo[top] = s
    return top + 1


@njit(cache=True, nogil=True)
def _live_states(eps_ptr, eps_idx, e_ptr, e_tgt, nt_ptr, nt_rule, nt_tgt, starts, finals):
    """(live, productive): the states that can reach their rule's end, the rules that can
    match something; the two grow together (a reference is followed backwards once its rule
    is productive)."""
    n = eps_ptr.shape[0] - 1
    n_rules = starts.shape[0]
    n_nt = nt_tgt.shape[0]
    # predecessors through empty and byte moves
    rptr = np.zeros(n + 1, np.int64)
    for j in range(eps_idx.shape[0]):
        rptr[eps_idx[j] + 1] += 1
    for j in range(e_tgt.shape[0]):
        rptr[e_tgt[j] + 1] += 1
    for s in range(n):
        rptr[s + 1] += rptr[s]
    fill = rptr[:-1].copy()
    ridx = np.empty(rptr[n], np.int64)
    for s in range(n):
        for j in range(eps_ptr[s], eps_ptr[s + 1]):
            ridx[fill[eps_idx[j]]] = s
            fill[eps_idx[j]] += 1
        for j in range(e_ptr[s], e_ptr[s + 1]):
            ridx[fill[e_tgt[j]]] = s
            fill[e_tgt[j]] += 1
    # references: their source, grouped by target and by rule
    nt_src = np.empty(n_nt, np.int64)
    for s in range(n):
        for j in range(nt_ptr[s], nt_ptr[s + 1]):
            nt_src[j] = s
    ids = np.arange(n_nt).reshape(1, -1)
    tgt_ptr, by_tgt = nfa_layout.by_source(n, nt_tgt, ids)
    rule_ptr, by_rule = nfa_layout.by_source(n_rules, nt_rule, ids)
    by_tgt, by_rule = by_tgt[0], by_rule[0]
    rule_of_start = np.full(n, -1, np.int64)
    for r in range(n_rules):
        rule_of_start[starts[r]] = r
    live = np.zeros(n, np.bool_)
    productive = np.zeros(n_rules, np.bool_)
    todo = np.empty(n, np.int64)  # states found live whose predecessors are not looked at yet
    top = 0
    for r in range(n_rules):
        top = _found(live, todo, top, finals[r])
    while top:
        top -= 1
        t = todo[top]
        r = rule_of_start[t]
        if r >= 0 and not productive[r]:  # the references to r now lead on where they return
            productive[r] = True  # to a live state
            for k in range(rule_ptr[r], rule_ptr[r + 1]):
                j = by_rule[k]
                if live[nt_tgt[j]]:
                    top = _found(live, todo, top, nt_src[j])
        for j in range(rptr[t], rptr[t + 1]):
            top = _found(live, todo, top, ridx[j])
        for k in range(tgt_ptr[t], tgt_ptr[t + 1]):
            j = by_tgt[k]
            if productive[nt_rule[j]]:
                top = _found(live, todo, top, nt_src[j])
    return live, productive


@njit(cache=True, nogil=True)
def _kept(ptr, keep):
    """The pointer of CSR rows `ptr` with only the entries where `keep`."""
    n = ptr.shape[0] - 1
    out = np.zeros(n + 1, np.int64)
    for s in range(n):
        c = 0
        for j in range(ptr[s], ptr[s + 1]):
            c += keep[j]
        out[s + 1] = out[s] + c
    return out


@njit(cache=True, nogil=True)
def _pruned(g, live, productive):
    """g's moves among live states, and references to productive rules only."""
    eps_ptr, eps_idx, e_ptr, e_byte, e_mask, e_tgt, masks, nt_ptr, nt_rule, nt_tgt = g
    n = live.shape[0]
    keep_eps = np.zeros(eps_idx.shape[0], np.bool_)
    keep_e = np.zeros(e_tgt.shape[0], np.bool_)
    keep_nt = np.zeros(nt_tgt.shape[0], np.bool_)
    for s in range(n):
        if live[s]:
            for j in range(eps_ptr[s], eps_ptr[s + 1]):
                keep_eps[j] = live[eps_idx[j]]
            for j in range(e_ptr[s], e_ptr[s + 1]):
                keep_e[j] = live[e_tgt[j]]
            for j in range(nt_ptr[s], nt_ptr[s + 1]):
                keep_nt[j] = live[nt_tgt[j]] and productive[nt_rule[j]]
    return (
        _kept(eps_ptr, keep_eps),
        eps_idx[keep_eps],
        _kept(e_ptr, keep_e),
        e_byte[keep_e],
        e_mask[keep_e],
        e_tgt[keep_e],
        masks,
        _kept(nt_ptr, keep_nt),
        nt_rule[keep_nt],
        nt_tgt[keep_nt],
    )


@njit(cache=True, nogil=True)
def _reach(s, g, nullable, mark, stamp, stack, out):
    """States reachable from s through empty moves and references to `nullable` rules, into
    out; their count (mark[x] == stamp for each)."""
    eps_ptr, eps_idx, nt_ptr, nt_rule, nt_tgt = g[0], g[1], g[7], g[8], g[9]
    mark[s] = stamp
    stack[0] = s
    top, k = 1, 0
    while top:
        top -= 1
        x = stack[top]
        out[k] = x
        k += 1
        for j in range(eps_ptr[x], eps_ptr[x + 1]):
            y = eps_idx[j]
            if mark[y] != stamp:
                mark[y] = stamp
                stack[top] = y
                top += 1
        for j in range(nt_ptr[x], nt_ptr[x + 1]):
            y = nt_tgt[j]
            if nullable[nt_rule[j]] and mark[y] != stamp:
                mark[y] = stamp
                stack[top] = y
                top += 1
    return k


@njit(cache=True, nogil=True)
def _calls(g, starts, nullable, mark, stack, buf):
    """The rules each rule references before reading a byte (through `nullable` rules), as
    CSR rows (ptr, rules), each rule listed once per row."""
    nt_ptr, nt_rule = g[7], g[8]
    n_rules = starts.shape[0]
    ptr = np.zeros(n_rules + 1, np.int64)
    out = np.empty(nt_rule.shape[0] + n_rules, np.int64)
    seen = np.full(n_rules, -1, np.int64)
    for r in range(n_rules):
        mark[-1] += 1
        k = _reach(starts[r], g, nullable, mark, mark[-1], stack, buf)
        top = ptr[r]
        for i in range(k):
            x = buf[i]
            for j in range(nt_ptr[x], nt_ptr[x + 1]):
                q = nt_rule[j]
                if seen[q] != r:
                    seen[q] = r
                    if top == out.shape[0]:
                        grown = np.empty(2 * top, np.int64)
                        grown[:top] = out
                        out = grown
                    out[top] = q
                    top += 1
        ptr[r + 1] = top
    return ptr, out


@njit(cache=True, nogil=True)
def _left_recursive(g, starts, finals, mark, stack, buf):
    """The first rule that can reach itself without reading a byte, or -1."""
    n_rules = starts.shape[0]
    nullable = np.zeros(n_rules, np.bool_)
    changed = True
    while changed:
        changed = False
        for r in range(n_rules):
            if not nullable[r]:
                mark[-1] += 1
                _reach(starts[r], g, nullable, mark, mark[-1], stack, buf)
                if mark[finals[r]] == mark[-1]:
                    nullable[r] = True
                    changed = True
    ptr, calls = _calls(g, starts, nullable, mark, stack, buf)
    seen = np.full(n_rules, -1, np.int64)
    todo = np.empty(2 * ptr[n_rules] + 1, np.int64)
    for r in range(n_rules):
        top = 0
        for j in range(ptr[r], ptr[r + 1]):
            todo[top] = calls[j]
            top += 1
        while top:
            top -= 1
            x = todo[top]
            if x == r:
                return r
            if seen[x] != r:
                seen[x] = r
                for j in range(ptr[x], ptr[x + 1]):
                    todo[top] = calls[j]
                    top += 1
    return -1


@njit(cache=True, nogil=True)
def _first_bytes(g, starts, finals, mark, stack, buf):
    """first[r, b]: byte b can start rule r (every byte when r can be empty, since then what
    follows counts); rule references before a byte form no cycle (no left recursion)."""
    e_ptr, e_byte, e_mask, masks = g[2], g[3], g[4], g[6]
    n_rules = starts.shape[0]
    no_rules = np.zeros(n_rules, np.bool_)
    first = np.zeros((n_rules, 256), np.bool_)
    ptr, calls = _calls(g, starts, no_rules, mark, stack, buf)
    every = np.zeros(n_rules, np.bool_)
    for r in range(n_rules):
        mark[-1] += 1
        k = _reach(starts[r], g, no_rules, mark, mark[-1], stack, buf)
        if mark[finals[r]] == mark[-1]:
            every[r] = True
            continue
        for i in range(k):
            x = buf[i]
            for j in range(e_ptr[x], e_ptr[x + 1]):
                if e_byte[j] >= 0:
                    first[r, e_byte[j]] = True
                else:  # 4 words (nfa_layout.mask_columns)
                    m = e_mask[j]
                    for b in range(256):
                        if masks[m, b >> 6] >> np.uint64(b & 63) & np.uint64(1):
                            first[r, b] = True
    # callees before callers (depth first; 1: in progress, 2: done)
    state = np.zeros(n_rules, np.int64)
    todo = np.empty(n_rules, np.int64)
    for r in range(n_rules):
        if state[r]:
            continue
        todo[0] = r
        top = 1
        state[r] = 1
        while top:
            x = todo[top - 1]
            waiting = False
            for j in range(ptr[x], ptr[x + 1]):
                if state[calls[j]] == 0:
                    state[calls[j]] = 1
                    todo[top] = calls[j]
                    top += 1
                    waiting = True
                    break
            if waiting:
                continue
            top -= 1
            state[x] = 2
            for j in range(ptr[x], ptr[x + 1]):
                every[x] |= state[calls[j]] == 1 or every[calls[j]]
                first[x] |= first[calls[j]]
            if every[x]:
                first[x, :] = True
    return first


@njit(cache=True, nogil=True)
def _passes(g, root, starts, finals, mark, stack, buf):
    """(outcome, pruned graph, first bytes): outcome -2 when the grammar is usable, -1 when
    the root rule matches nothing, r >= 0 when rule r is left recursive."""
    live, productive = _live_states(g[0], g[1], g[2], g[5], g[7], g[8], g[9], starts, finals)
    first = np.zeros((starts.shape[0], 256), np.bool_)
    if not productive[root]:
        return -1, g, first
    if not (live.all() and productive.all()):
        g = _pruned(g, live, productive)
    if not g[9].shape[0]:  # no rule is ever pushed: what may start one is never asked
        return -2, g, first
    bad = _left_recursive(g, starts, finals, mark, stack, buf)
    if bad >= 0:
        return bad, g, first
    return -2, g, _first_bytes(g, starts, finals, mark, stack, buf)


@njit(cache=True, nogil=True)
def _frozen(g, root, starts, finals):
    """_passes' outcome and NFAArrays' fields: the pruned graph, which states are final and
    which are important (a byte move, a reference or a rule end), the first bytes, and the
    kernels' scratch arrays."""
    n = g[0].shape[0] - 1
    mark = np.zeros(n + 1, np.int64)  # the last slot holds the current stamp
    stack = np.empty(max(n, 1), np.int64)
    buf = np.empty(max(n, 1), np.int64)
    outcome, g, first = _passes(g, root, starts, finals, mark, stack, buf)
    eps_ptr, eps_idx, e_ptr, e_byte, e_mask, e_tgt, masks, nt_ptr, nt_rule, nt_tgt = g
    final = np.zeros(n, np.bool_)
    final[finals] = True
    important = final.copy()
    for s in range(n):
        if e_ptr[s + 1] > e_ptr[s] or nt_ptr[s + 1] > nt_ptr[s]:
            important[s] = True
    mark[:] = 0
    pairs = np.empty((max(nt_tgt.shape[0], 1), 2), np.int64)
    return outcome, (
        eps_ptr, eps_idx, important, final, e_ptr, e_byte, e_mask, e_tgt, masks, nt_ptr,
        nt_rule, nt_tgt, first, mark, stack, buf, pairs, np.empty((EDGE_ROOM, 4), np.uint64),
        np.empty(EDGE_ROOM, np.int64), np.empty((256, 4), np.uint64),
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _laid_out_frozen(layout_args, root, starts, finals):
    """_frozen of nfa_layout.laid_out's graph, in one call, and the box of its arrays
    (grammars/boxes.py) with whether it references rules: no array is handed back to Python
    (~0.5-1 µs each)."""
    outcome, arrays = _frozen(nfa_layout.laid_out(*layout_args), root, starts, finals)
    box = boxes.nfa_of(arrays)
    return outcome, box, box.nt_tgt.shape[0] > 0


def frozen_graph(nfa, rule_index: dict[str, int], names, root: int, starts, finals) -> tuple:
    """The box (grammars/boxes.py) of the arrays the lazy DFA's kernels read
    (lazydfa.NFAArrays), and whether they reference rules: the graph of `nfa`
    (lazydfa_arrays.nfa_graph) without the states that cannot reach their rule's end and without
    references to rules that cannot match anything, with first[r, b]: byte b can start rule r
    (all False when no rule is referenced). GrammarError when the root rule matches nothing,
    or when a rule can reach itself without reading a byte (left recursion)."""
    checkpoint()
    outcome, box, pushes = fastcall.call(
        _laid_out_frozen,
        lazydfa_arrays.graph_args(nfa, rule_index),
        root,
        np.asarray(starts, np.int64),
        np.asarray(finals, np.int64),
    )
    checkpoint()
    if outcome == -1:
        raise GrammarError("the constraint admits no value at all")
    if outcome >= 0:
        raise GrammarError(f"left recursion in rule {names[outcome]!r}")
    return box, pushes
