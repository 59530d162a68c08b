"""The arrays of the lazy DFA on the Python side: the NFA frozen into them, an empty DFA, and
copies grown when a kernel of lazydfa.py returns NEED_SPACE."""

from __future__ import annotations

from itertools import chain

import numpy as np

from grammars.budget import checkpoint
from grammars.lazydfa import _MEM, _PUSHES, _STATES, _WANT, DFAArrays, NFAArrays, rehash


def _mask_row(mask: int) -> np.ndarray:
    return np.unpackbits(
        np.frombuffer(mask.to_bytes(32, "little"), np.uint8), bitorder="little"
    ).astype(np.bool_)


def freeze_nfa(nfa, rule_index: dict[str, int], finals, first: np.ndarray) -> NFAArrays:
    """A grammars.automaton.NFA as arrays; `first[r]` = the bytes that can start rule r."""
    n = len(nfa.eps)

    def csr(lists):
        lengths = np.fromiter(map(len, lists), np.int64, n)
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=ptr[1:])
        return ptr

    eps_ptr = csr(nfa.eps)
    eps_idx = np.fromiter(chain.from_iterable(nfa.eps), np.int64, int(eps_ptr[-1]))
    checkpoint()
    e_ptr = csr(nfa.edges)
    checkpoint()
    flat = list(chain.from_iterable(nfa.edges))
    mask_ids: dict[int, int] = {}
    e_byte = np.full(len(flat), -1, np.int64)
    e_mask = np.full(len(flat), -1, np.int64)
    for j, (mask, _) in enumerate(flat):
        if not j & 4095:
            checkpoint()
        if mask & (mask - 1) == 0:
            e_byte[j] = mask.bit_length() - 1
        else:
            e_mask[j] = mask_ids.setdefault(mask, len(mask_ids))
    masks = np.zeros((max(1, len(mask_ids)), 256), np.bool_)
    for mask, k in mask_ids.items():
        if not k & 1023:
            checkpoint()
        masks[k] = _mask_row(mask)
    e_tgt = np.fromiter((t for _, t in flat), np.int64, len(flat))
    checkpoint()
    nt_ptr = csr(nfa.nts)
    checkpoint()
    nt_flat = list(chain.from_iterable(nfa.nts))
    nt_rule = np.fromiter((rule_index[r] for r, _ in nt_flat), np.int64, len(nt_flat))
    nt_tgt = np.fromiter((t for _, t in nt_flat), np.int64, len(nt_flat))
    final = np.zeros(n, np.bool_)
    final[list(finals)] = True
    important = final.copy()
    important[np.diff(e_ptr) > 0] = True
    important[np.diff(nt_ptr) > 0] = True
    return NFAArrays(
        eps_ptr,
        eps_idx,
        important,
        final,
        e_ptr,
        e_byte,
        e_mask,
        e_tgt,
        masks,
        nt_ptr,
        nt_rule,
        nt_tgt,
        first,
        np.zeros(n + 1, np.int64),
        np.empty(max(n, 1), np.int64),
        np.empty(max(n, 1), np.int64),
        np.empty((max(len(nt_flat), 1), 2), np.int64),
    )


def empty_dfa(capacity: int = 1024) -> DFAArrays:
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
