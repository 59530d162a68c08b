"""The arrays of the lazy DFA on the Python side: the NFA frozen into them, an empty DFA, and
copies grown when a kernel of lazydfa.py returns NEED_SPACE."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from grammars.budget import checkpoint
from grammars.fragments import use_arrays
from grammars.lazydfa import _MEM, _PUSHES, _STATES, _WANT, DFAArrays, NFAArrays, rehash

NFAGraph = namedtuple(
    "NFAGraph", "eps_ptr eps_idx e_ptr e_byte e_mask e_tgt masks nt_ptr nt_rule nt_tgt"
)
NFAGraph.__doc__ = """An NFA's moves as CSR arrays by source state: empty moves, byte moves (a
byte, or -1 and a row of `masks`) and rule references (rule number, state to return to)."""


def nfa_graph(nfa, rule_index: dict[str, int]) -> NFAGraph:
    """A grammars.automaton.NFA as arrays (its embedded DFAs copied as arrays)."""
    n = nfa.size
    index: dict[int, int] = {}  # the distinct masks, numbered
    eps_src, eps_tgt, e_src, e_id, e_tgt = ([] for _ in range(5))
    a, b = zip(*nfa.eps) if nfa.eps else ((), ())
    eps = (np.array(a, np.int64), np.array(b, np.int64))
    a, masks, b = zip(*nfa.edges) if nfa.edges else ((), (), ())
    number = index.setdefault
    ids = np.fromiter((number(m, len(index)) for m in masks), np.int64, len(masks))
    edges = (np.array(a, np.int64), ids, np.array(b, np.int64))
    a, names, b = zip(*nfa.nts) if nfa.nts else ((), (), ())
    rules = np.array([rule_index[r] for r in names], np.int64)
    nts = (np.array(a, np.int64), rules, np.array(b, np.int64))
    more_eps, more_edges, more_nts = use_arrays(nfa.frag_uses, eps, edges, nts)
    eps_src += [eps[0], *more_eps[0]]
    eps_tgt += [eps[1], *more_eps[1]]
    e_src += [edges[0], *more_edges[0]]
    e_id += [edges[1], *more_edges[1]]
    e_tgt += [edges[2], *more_edges[2]]
    groups: dict[int, tuple] = {}  # id(dfa) -> (dfa, [(first state, from, to)])
    for base, s, e, dfa in nfa.copies:
        groups.setdefault(id(dfa), (dfa, []))[1].append((base, s, e))
    for dfa, places in groups.values():  # the copies of one DFA at once, as offset arrays
        src, ids, tgt, distinct, accepting = dfa.moves()
        ids_here = np.array([index.setdefault(m, len(index)) for m in distinct], np.int64)
        columns = np.array(places, np.int64)
        bases, froms, tos = columns[:, 0:1], columns[:, 1:2], columns[:, 2:3]
        e_src.append((src + bases).ravel())
        e_id.append(np.broadcast_to(ids_here[ids], (len(places), len(ids))).ravel())
        e_tgt.append((tgt + bases).ravel())
        eps_src.append(np.concatenate((froms, accepting + bases), axis=1).ravel())
        enter = np.broadcast_to(tos, (len(places), len(accepting)))
        eps_tgt.append(np.concatenate((bases + dfa.start, enter), axis=1).ravel())
    checkpoint()

    def by_source(src, *columns):
        """(ptr, *columns sorted by source state)."""
        src = np.concatenate(src) if src else np.zeros(0, np.int64)
        order = np.argsort(src, kind="stable")
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
        return (ptr, *((np.concatenate(c) if c else src)[order] for c in columns))

    eps_ptr, eps_idx = by_source(eps_src, eps_tgt)
    e_ptr, edge_ids, e_tgt = by_source(e_src, e_id, e_tgt)
    distinct = list(index)
    single = np.array([m & (m - 1) == 0 for m in distinct], np.bool_)
    byte_of = np.array([m.bit_length() - 1 for m in distinct], np.int64)
    row_of = np.cumsum(~single) - 1
    e_byte = np.where(single[edge_ids], byte_of[edge_ids], -1)
    e_mask = np.where(single[edge_ids], -1, row_of[edge_ids])
    checkpoint()
    wide = [m for m, one in zip(distinct, single.tolist()) if not one]
    masks = np.zeros((max(1, len(wide)), 256), np.bool_)
    if wide:
        packed = b"".join(m.to_bytes(32, "little") for m in wide)
        bits = np.unpackbits(np.frombuffer(packed, np.uint8), bitorder="little")
        masks[: len(wide)] = bits.reshape(len(wide), 256).astype(np.bool_)
    checkpoint()
    nt_src, nt_rule, nt_tgt = ([nts[i], *more_nts[i]] for i in range(3))
    nt_ptr, nt_rule, nt_tgt = by_source(nt_src, nt_rule, nt_tgt)
    return NFAGraph(eps_ptr, eps_idx, e_ptr, e_byte, e_mask, e_tgt, masks, nt_ptr, nt_rule, nt_tgt)


def freeze_nfa(graph: NFAGraph, finals, first: np.ndarray) -> NFAArrays:
    """The arrays the lazy DFA's kernels read; `first[r]` = the bytes that can start rule r."""
    g = graph
    n = len(g.eps_ptr) - 1
    final = np.zeros(n, np.bool_)
    final[list(finals)] = True
    important = final.copy()
    important[np.diff(g.e_ptr) > 0] = True
    important[np.diff(g.nt_ptr) > 0] = True
    return NFAArrays(
        g.eps_ptr,
        g.eps_idx,
        important,
        final,
        g.e_ptr,
        g.e_byte,
        g.e_mask,
        g.e_tgt,
        g.masks,
        g.nt_ptr,
        g.nt_rule,
        g.nt_tgt,
        first,
        np.zeros(n + 1, np.int64),
        np.empty(max(n, 1), np.int64),
        np.empty(max(n, 1), np.int64),
        np.empty((max(len(g.nt_tgt), 1), 2), np.int64),
    )


def empty_dfa(capacity: int = 256) -> DFAArrays:
    dfa = DFAArrays(
        table=np.zeros((capacity, 256), np.int32),
        viable=np.zeros((capacity, 256), np.bool_),
        accept=np.zeros(capacity, np.bool_),
        done=np.zeros(capacity, np.bool_),
        m_ptr=np.zeros(capacity + 1, np.int64),
        mem=np.zeros(capacity * 4, np.int64),
        hkey=np.full(capacity * 4, -1, np.int64),
        hcode=np.zeros(capacity * 4, np.int64),
        push_start=np.zeros(capacity, np.int64),
        push_count=np.full(capacity, -1, np.int64),
        push_rule=np.zeros(capacity, np.int64),
        push_ret=np.zeros(capacity, np.int64),
        meta=np.zeros(5, np.int64),
    )
    dfa.done[0] = True  # state 0 is the dead state: no members, all bytes lead back to it
    dfa.push_count[0] = 0
    dfa.meta[_STATES] = 1
    return dfa


def has_room(dfa: DFAArrays, states: int) -> bool:
    """The arrays can take `states` more states (of a few members each) without growing."""
    n, used = int(dfa.meta[_STATES]), int(dfa.meta[_MEM])
    return (
        n + states < dfa.accept.shape[0]
        and 2 * (n + states) <= dfa.hkey.shape[0]
        and used + 4 * states <= dfa.mem.shape[0]
    )


def grown(dfa: DFAArrays, states: int = 0) -> DFAArrays:
    """Copies of the arrays with room for what the last call wanted, and for `states` more
    states (of a few members each)."""
    n, used, pushes, want = (int(dfa.meta[i]) for i in (_STATES, _MEM, _PUSHES, _WANT))
    want = max(want, 4 * states)

    def bigger(arr, size, fill=0):
        if size <= arr.shape[0]:
            return arr
        out = np.full((size,) + arr.shape[1:], fill, arr.dtype)
        out[: arr.shape[0]] = arr
        return out

    room = dfa.push_rule.shape[0]
    cap = dfa.accept.shape[0]
    while n + 1 + states >= cap:
        cap *= 2
    size = dfa.hkey.shape[0]
    rehashed = 2 * (n + 1 + states) > size
    while 2 * (n + 1 + states) > size:
        size *= 4
    out = DFAArrays(
        table=bigger(dfa.table, cap),
        viable=bigger(dfa.viable, cap),
        accept=bigger(dfa.accept, cap),
        done=bigger(dfa.done, cap),
        m_ptr=bigger(dfa.m_ptr, cap + 1),
        mem=dfa.mem if used + want <= len(dfa.mem) else bigger(dfa.mem, 2 * (used + want)),
        hkey=dfa.hkey if not rehashed else np.full(size, -1, np.int64),
        hcode=dfa.hcode if not rehashed else np.zeros(size, np.int64),
        push_start=bigger(dfa.push_start, cap),
        push_count=bigger(dfa.push_count, cap, -1),
        push_rule=bigger(dfa.push_rule, 2 * (pushes + want) if pushes + want > room else 0),
        push_ret=bigger(dfa.push_ret, 2 * (pushes + want) if pushes + want > room else 0),
        meta=dfa.meta,
    )
    if rehashed:
        rehash(out)
    out.meta[_WANT] = 0  # served
    return out
