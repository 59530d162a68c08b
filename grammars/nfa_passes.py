"""Passes over the NFA of a whole grammar, in arrays (lazydfa_arrays.NFAGraph), before it is
frozen for the lazy DFA (grammar.Machine): prune what cannot finish, refuse left recursion, and
find the bytes that can start each rule.

`starts[r]` and `finals[r]` are the NFA states where rule r begins and ends; rule references
are the graph's nt edges (source state, rule, target state).
"""

from __future__ import annotations

import numpy as np

from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.lazydfa import njit
from grammars.lazydfa_arrays import NFAGraph


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
    by_tgt = np.argsort(nt_tgt, kind="mergesort")
    tgt_ptr = np.searchsorted(nt_tgt[by_tgt], np.arange(n + 1))
    by_rule = np.argsort(nt_rule, kind="mergesort")
    rule_ptr = np.searchsorted(nt_rule[by_rule], np.arange(n_rules + 1))
    rule_of_start = np.full(n, -1, np.int64)
    for r in range(n_rules):
        rule_of_start[starts[r]] = r
    live = np.zeros(n, np.bool_)
    productive = np.zeros(n_rules, np.bool_)
    pend = np.empty(n + ridx.shape[0] + 2 * n_nt + finals.shape[0] + 1, np.int64)
    todo = np.empty(n + 1, np.int64)
    n_pend = 0
    n_todo = 0
    for r in range(n_rules):
        pend[n_pend] = finals[r]
        n_pend += 1
    while n_pend or n_todo:
        if n_pend:
            n_pend -= 1
            s = pend[n_pend]
            if live[s]:
                continue
            live[s] = True
            todo[n_todo] = s
            n_todo += 1
            r = rule_of_start[s]
            if r >= 0 and not productive[r]:
                productive[r] = True
                for k in range(rule_ptr[r], rule_ptr[r + 1]):
                    j = by_rule[k]
                    if live[nt_tgt[j]]:
                        pend[n_pend] = nt_src[j]
                        n_pend += 1
        else:
            n_todo -= 1
            t = todo[n_todo]
            for j in range(rptr[t], rptr[t + 1]):
                pend[n_pend] = ridx[j]
                n_pend += 1
            for k in range(tgt_ptr[t], tgt_ptr[t + 1]):
                j = by_tgt[k]
                if productive[nt_rule[j]]:
                    pend[n_pend] = nt_src[j]
                    n_pend += 1
    return live, productive


def _kept(ptr: np.ndarray, keep: np.ndarray, *columns: np.ndarray) -> tuple:
    """The CSR rows of `ptr` with only the entries where `keep`: (ptr, *columns)."""
    n = len(ptr) - 1
    src = np.repeat(np.arange(n), np.diff(ptr))
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src[keep], minlength=n), out=out[1:])
    return (out, *(c[keep] for c in columns))


def prune(graph: NFAGraph, root: int, starts, finals) -> NFAGraph:
    """The graph without the states that cannot reach their rule's end and without references
    to rules that cannot match anything (GrammarError when the root rule is one of them)."""
    checkpoint()
    g = graph
    starts = np.asarray(starts, np.int64)
    live, productive = _live_states(
        g.eps_ptr,
        g.eps_idx,
        g.e_ptr,
        g.e_tgt,
        g.nt_ptr,
        g.nt_rule,
        g.nt_tgt,
        starts,
        np.asarray(finals, np.int64),
    )
    checkpoint()
    if not productive[root]:
        raise GrammarError("the constraint admits no value at all")
    if live.all() and productive.all():
        return graph  # nothing to drop (the common case)
    n = len(live)

    def sources(ptr):
        return np.repeat(np.arange(n), np.diff(ptr))

    eps = _kept(g.eps_ptr, live[sources(g.eps_ptr)] & live[g.eps_idx], g.eps_idx)
    edges = _kept(g.e_ptr, live[sources(g.e_ptr)] & live[g.e_tgt], g.e_byte, g.e_mask, g.e_tgt)
    nt_keep = live[sources(g.nt_ptr)] & live[g.nt_tgt] & productive[g.nt_rule]
    nts = _kept(g.nt_ptr, nt_keep, g.nt_rule, g.nt_tgt)
    return NFAGraph(*eps, *edges, g.masks, *nts)


class Lists:
    """A graph's arrays as Python lists, for the small walks below."""

    def __init__(self, graph: NFAGraph):
        self.eps_ptr = graph.eps_ptr.tolist()
        self.eps_idx = graph.eps_idx.tolist()
        self.nt_ptr = graph.nt_ptr.tolist()
        self.nt_rule = graph.nt_rule.tolist()
        self.nt_tgt = graph.nt_tgt.tolist()
        self.e_ptr = graph.e_ptr.tolist()

    def eps_reach(self, s: int, nullable: set[int] | None) -> set[int]:
        """States reachable from s through empty moves and references to `nullable` rules."""
        seen, todo = {s}, [s]
        popped = 0
        eps_ptr, eps_idx = self.eps_ptr, self.eps_idx
        nt_ptr, nt_rule, nt_tgt = self.nt_ptr, self.nt_rule, self.nt_tgt
        while todo:
            popped += 1
            if not popped & 4095:
                checkpoint()
            x = todo.pop()
            nxt = eps_idx[eps_ptr[x] : eps_ptr[x + 1]]
            if nullable:
                nxt = nxt + [
                    nt_tgt[j] for j in range(nt_ptr[x], nt_ptr[x + 1]) if nt_rule[j] in nullable
                ]
            for t in nxt:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    def calls(self, states) -> set[int]:
        nt_ptr, nt_rule = self.nt_ptr, self.nt_rule
        return {nt_rule[j] for x in states for j in range(nt_ptr[x], nt_ptr[x + 1])}


def check_left_recursion(graph: NFAGraph, names, starts, finals, lists=None) -> None:
    """GrammarError naming a rule that can reach itself without reading a byte (`lists`: the
    graph's Lists, when made already)."""
    if not len(graph.nt_tgt):
        return
    lists = lists or Lists(graph)
    nullable: set[int] = set()
    changed = True
    while changed:
        changed = False
        for r, s in enumerate(starts):
            if r not in nullable and finals[r] in lists.eps_reach(s, nullable):
                nullable.add(r)
                changed = True
    calls = {r: lists.calls(lists.eps_reach(s, nullable)) for r, s in enumerate(starts)}
    for r in range(len(starts)):
        checkpoint()
        seen, todo = set(), list(calls[r])
        while todo:
            x = todo.pop()
            if x == r:
                raise GrammarError(f"left recursion in rule {names[r]!r}")
            if x not in seen:
                seen.add(x)
                todo.extend(calls[x])


def first_bytes(graph: NFAGraph, starts, finals, lists=None) -> np.ndarray:
    """first[r, b]: byte b can start rule r (every byte when r can be empty, since then what
    follows counts)."""
    lists = lists or Lists(graph)
    rows: dict[int, np.ndarray] = {}
    out = np.zeros((len(starts), 256), bool)
    for r in range(len(starts)):
        out[r] = _first_of(r, rows, graph, lists, starts, finals)
    return out


_EVERY_BYTE = np.ones(256, np.bool_)


def _first_of(r: int, rows: dict, graph: NFAGraph, lists: Lists, starts, finals) -> np.ndarray:
    """first_bytes' row of rule r (a function of the module rather than a closure: a closure
    that calls itself is a cycle, which would keep `lists` until the cyclic collector runs)."""
    if r in rows:
        return rows[r]
    checkpoint()
    rows[r] = _EVERY_BYTE  # conservative while computing (recursion)
    members = lists.eps_reach(starts[r], None)
    if finals[r] in members:
        return _EVERY_BYTE
    e_ptr = lists.e_ptr
    edges = np.array([j for n in members for j in range(e_ptr[n], e_ptr[n + 1])], np.int64)
    row = np.zeros(256, np.bool_)
    single = graph.e_byte[edges]
    row[single[single >= 0]] = True
    multi = graph.e_mask[edges]
    multi = multi[multi >= 0]
    if len(multi):
        row |= graph.masks[multi].any(axis=0)
    for q in lists.calls(members):
        row |= _first_of(q, rows, graph, lists, starts, finals)
    rows[r] = row
    return row
