"""The arrays of the lazy DFA on the Python side: the NFA laid out as arrays (which
nfa_passes.frozen turns into the kernels' NFAArrays, in their box), a new DFA holding the
rules' start states, and copies grown when a kernel of lazydfa.py returns NEED_SPACE."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from grammars import fastcall, nfa_layout
from grammars.array_dfa import mask_bytes
from grammars.budget import checkpoint
from grammars.lazydfa import (
    _MEM,
    _PUSHES,
    _STATES,
    _WANT,
    NEED_SPACE,
    DFAArrays,
    intern_starts,
    njit,
    rehash,
)

NFAGraph = namedtuple(
    "NFAGraph", "eps_ptr eps_idx e_ptr e_byte e_mask e_tgt masks nt_ptr nt_rule nt_tgt"
)
NFAGraph.__doc__ = """An NFA's moves as CSR arrays by source state: empty moves, byte moves (a
byte, or -1 and a row of `masks`: several bytes as four 64-bit words) and rule references
(rule number, state to return to)."""


def nfa_graph(nfa, rule_index: dict[str, int]) -> NFAGraph:
    """A grammars.automaton.NFA as arrays (its fragment uses and embedded DFAs laid out by
    nfa_layout.laid_out)."""
    return NFAGraph(*fastcall.call(nfa_layout.laid_out, *graph_args(nfa, rule_index)))


def graph_args(nfa, rule_index: dict[str, int]) -> tuple:
    """nfa_layout.laid_out's arguments for `nfa` (nfa_passes.frozen_graph passes them
    on in the same compiled call): its moves, fragment uses, copies and the copied DFAs'
    records (_dfa_record) end to end in one int64 array with the sizes of the parts, and the
    masks as packed rows, the NFA's own first. Two numpy calls in all (made part by part,
    twelve arrays of which three joined from per-DFA pieces, they cost ~1% more of a median
    compile)."""
    edges = nfa.edges[:]
    index: dict[int, int] = {}  # the distinct masks in order of first use, numbered
    number = index.setdefault  # one hash a mask (they are ints of up to 256 bits)
    edges[1::3] = [number(m, len(index)) for m in edges[1::3]]
    nts = nfa.nts[:]
    nts[1::3] = map(rule_index.__getitem__, nts[1::3])
    uses = [
        x
        for f, base, s, e in nfa.frag_uses
        for x in (f.eps.start, f.eps.stop, f.edges.start, f.edges.stop, f.nts.start, f.nts.stop)
        + (f.s, f.e, f.first, base, s, e)
    ]
    dfa_number: dict[int, int] = {}  # id(dfa) -> its index among the records
    records, masks, copies = [], [m.to_bytes(32, "little") for m in index], []
    for base, s, e, dfa in nfa.copies:
        d = dfa_number.get(id(dfa))
        if d is None:
            d = dfa_number[id(dfa)] = len(records)
            record, packed = _dfa_record(dfa)
            records.append(record)
            masks.append(packed)
        copies += (d, base, s, e)
    checkpoint()
    ints = nfa.eps + edges + nts + uses + copies
    sizes = (nfa.size, len(nfa.eps), len(edges), len(nts), len(uses), len(copies), len(records))
    head = np.fromiter(ints, np.int64, len(ints))
    return (
        np.concatenate((head, *records)) if records else head,
        np.array(sizes + (len(index),), np.int64),
        np.frombuffer(bytearray(b"".join(masks)), np.uint8).reshape(-1, 32),  # writable
    )


def _dfa_record(dfa) -> tuple[np.ndarray, bytes]:
    """What nfa_layout.laid_out reads of a DFA copied into NFAs, made once per DFA (kept on
    it, as its moves are): its number of moves, of accepting states, its start and number of
    masks, then its moves' sources, mask ids and targets and its accepting states, as one
    int64 array; and its masks as packed rows (bytes)."""
    hit = dfa.__dict__.get("_layout_record")
    if hit is None:
        src, ids, tgt, accepting = dfa.move_arrays()
        packed = mask_bytes(dfa)
        head = np.array((len(src), len(accepting), dfa.start, len(packed)), np.int64)
        hit = (np.concatenate((head, src, ids, tgt, accepting)), packed.tobytes())
        dfa._layout_record = hit
    return hit


# states a new DFA has room for: a third of maskbench's grammars build more than 512 over
# their documents (Llama-3), and a growth from 512 cost 150-350 µs in the fill that needed
# the room (the copies' page faults); rows never written cost nothing (every per-state array
# is np.empty, only the interning table filled): room for 2,048 rather than 512 costs ~2 µs
# in _started, ~6 µs a compile (maskbench-dev, Llama-3)
_FIRST_CAPACITY = 2048


@njit(cache=True, nogil=True)
def _started(nfa, starts, out, capacity, poison):
    """A DFA with room for `capacity` states holding the dead state (0: no members, every
    byte leads back to it) and then intern_starts' states; (intern_starts' code, the DFA).
    A state's rows are left uninitialised (see enlarged) until the state is made, the dead
    state's written here; only the interning table is filled (-1: an empty slot)."""
    dfa = DFAArrays(
        np.empty((capacity, 256), np.int32),  # table
        np.empty((capacity, 256), np.bool_),  # viable
        np.empty(capacity, np.bool_),  # accept
        np.empty(capacity, np.bool_),  # done
        np.empty(capacity + 1, np.int64),  # m_ptr
        np.empty(capacity * 4, np.int64),  # mem
        np.full(capacity * 4, -1, np.int64),  # hkey
        np.empty(capacity * 4, np.int64),  # hcode
        np.empty(capacity, np.int64),  # push_start
        np.empty(capacity, np.int64),  # push_count
        np.empty(capacity, np.int64),  # push_rule
        np.empty(capacity, np.int64),  # push_ret
        np.zeros(5, np.int64),  # meta
    )
    if poison:
        dfa.table[:] = -1
        dfa.viable[:] = True
        dfa.accept[:] = True
        dfa.done[:] = True
        dfa.m_ptr[:] = -1
    dfa.table[0] = 0
    dfa.viable[0] = False
    dfa.accept[0] = False
    dfa.done[0] = True
    dfa.m_ptr[0] = 0
    dfa.m_ptr[1] = 0
    dfa.push_start[0] = 0
    dfa.push_count[0] = 0
    dfa.meta[_STATES] = 1
    return intern_starts(nfa, dfa, starts, out), dfa


def started_dfa(nfa, starts: list[int]) -> tuple[DFAArrays, list[int]]:
    """A new DFA holding the state of each NFA state of `starts` (with its eps closure), and
    those states, in one compiled call unless the arrays must grow (`nfa`: the box of the
    NFA's arrays, grammars/boxes.py)."""
    out = np.zeros(len(starts), np.int64)
    seeds = np.array(starts, np.int64)
    code, dfa = fastcall.call(_started, nfa, seeds, out, _FIRST_CAPACITY, fastcall.CHECK)
    while code == NEED_SPACE:
        dfa = grown(dfa)
        code = intern_starts(nfa, dfa, seeds, out)
    return dfa, out.tolist()


def enlarged(arr: np.ndarray, size: int, fill=0) -> np.ndarray:
    """`arr` with `size` rows, the new ones `fill` (`arr` itself when it has as many); None:
    left uninitialised, for the rows a kernel writes before any read (a state's rows when it is
    made, its moves and viable bytes in materialize; the member and push pools as they fill).
    Zeros come from calloc, but memory a freed grammar gave back is zeroed by calloc all the
    same (~0.4 ms for 8,192 rows of the table), where np.empty costs nothing until a row is
    written. With RADIXGEN_CHECK_KERNEL_TYPES set (the test suite), uninitialised rows are
    filled with a value no state has, so that a read before the write shows."""
    if size <= arr.shape[0]:
        return arr
    shape = (size,) + arr.shape[1:]
    if fill is None:
        out = np.empty(shape, arr.dtype)
        if fastcall.CHECK:
            out[arr.shape[0] :] = -1 if arr.dtype != np.bool_ else True
    elif fill == 0:
        out = np.zeros(shape, arr.dtype)
    else:
        out = np.empty(shape, arr.dtype)
        out[arr.shape[0] :] = fill
    out[: arr.shape[0]] = arr
    return out


def has_room(dfa: DFAArrays, states: int) -> bool:
    """The arrays can take `states` more states (of a few members each) without growing."""
    n, used = int(dfa.meta[_STATES]), int(dfa.meta[_MEM])
    return (
        n + states < dfa.accept.shape[0]
        and 2 * (n + states) <= dfa.hkey.shape[0]
        and used + 4 * states <= dfa.mem.shape[0]
    )


_MEMBERS_PER_ROW, _PUSHES_PER_ROW = 8, 2  # the room grown with the rows


def grown(dfa: DFAArrays, states: int = 0) -> DFAArrays:
    """Copies of the arrays with room for what the last call wanted, and for `states` more
    states (of a few members each)."""
    n, used, pushes, want = (int(dfa.meta[i]) for i in (_STATES, _MEM, _PUSHES, _WANT))
    want = max(want, 4 * states)

    room = dfa.push_rule.shape[0]
    cap = dfa.accept.shape[0]
    while n + 1 + states >= cap:  # by fours: the tables' rows are copied at each growth, and
        cap *= 4  # the pages of rows not yet written are never touched
    # every growth is a kernel call begun again: the hash, the member lists and the pushes
    # grow with the rows, so that they seldom run out first
    size = dfa.hkey.shape[0]
    rehashed = 2 * (n + 1 + states) > size or size < 2 * cap
    while 2 * (n + 1 + states) > size or size < 2 * cap:
        size *= 4
    mem_size = 2 * (used + want) if used + want > len(dfa.mem) else 0
    push_size = 2 * (pushes + want) if pushes + want > room else 0
    if cap > dfa.accept.shape[0]:
        mem_size = max(mem_size, _MEMBERS_PER_ROW * cap)
        push_size = max(push_size, _PUSHES_PER_ROW * cap)
    out = DFAArrays(
        table=enlarged(dfa.table, cap, None),
        viable=enlarged(dfa.viable, cap, None),
        accept=enlarged(dfa.accept, cap, None),
        done=enlarged(dfa.done, cap, None),
        m_ptr=enlarged(dfa.m_ptr, cap + 1, None),
        mem=enlarged(dfa.mem, mem_size, None),
        hkey=dfa.hkey if not rehashed else np.full(size, -1, np.int64),
        hcode=dfa.hcode if not rehashed else np.empty(size, np.int64),
        push_start=enlarged(dfa.push_start, cap, None),
        push_count=enlarged(dfa.push_count, cap, None),
        push_rule=enlarged(dfa.push_rule, push_size, None),
        push_ret=enlarged(dfa.push_ret, push_size, None),
        meta=dfa.meta,
    )
    if rehashed:
        fastcall.call(rehash, out)
    out.meta[_WANT] = 0  # served
    return out
