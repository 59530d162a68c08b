"""The automaton's arrays as one object each for the kernels' calls.

numba turns a Python argument into its native form at every call: for a tuple of arrays, each
array one by one (~0.1 µs each), so a call of a pda kernel with the NFA's, the DFA's and the
stacks' arrays (51 of them) cost ~6 µs before its first instruction, more when the arrays'
headers have left the cache; a mask computed for the first time makes about five such calls,
and so does a compile, and reading a token not read before makes one. The vocabulary's trie and
each of its chain layouts (vocabulary.TokenTrie, ChainLayout: 20 arrays) are boxed too, once
each, for the token walk. A box (a numba structure reference) holding the same arrays
crosses in one step (~0.1 µs). The Python side keeps the named tuples of the DFA and the stacks
(lazydfa.DFAArrays, pda.PDAArrays) and reads them; each time one is made or grown, its box is
made from it (a few µs), and the kernels called from Python on a grammar's automaton take the
boxes, whose fields are the tuples' names (a growth's rehash, which makes new arrays, still
takes the tuples). The NFA's arrays, which Python does not read, stay in their box from the
compiled call that makes them (handing an array back to Python costs ~0.5 µs: 10 µs a
compile for the NFA's 20); `nfa_arrays` gives them as lazydfa.NFAArrays on demand.

Each box type has its constructor, compiled and cached like the kernels (and typed by
compiler.warm_up), so that no process compiles anything at its first box. With RADIXGEN_NO_JIT
the tuples themselves are the boxes.
"""

from __future__ import annotations

from numba import njit, types
from numba.experimental import structref

from grammars import fastcall
from grammars.lazydfa import NFAArrays
from grammars.lazydfa import njit as kernel_njit


@structref.register
class _BoxType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Box(structref.StructRefProxy):
    """The arrays of one automaton structure, as the kernels take them (opaque here)."""

    __slots__ = ()


structref.define_boxing(_BoxType, Box)

_i64, _b1 = types.int64[::1], types.bool_[::1]
_i64_2d, _u64_2d, _b1_2d = types.int64[:, ::1], types.uint64[:, ::1], types.bool_[:, ::1]

_NFA = _BoxType(
    [
        ("eps_ptr", _i64),
        ("eps_idx", _i64),
        ("important", _b1),
        ("final", _b1),
        ("e_ptr", _i64),
        ("e_byte", _i64),
        ("e_mask", _i64),
        ("e_tgt", _i64),
        ("masks", _u64_2d),
        ("nt_ptr", _i64),
        ("nt_rule", _i64),
        ("nt_tgt", _i64),
        ("first", _b1_2d),
        ("mark", _i64),
        ("stack", _i64),
        ("buf", _i64),
        ("pairs", _i64_2d),
        ("edge_bits", _u64_2d),
        ("edge_tgts", _i64),
        ("classes", _u64_2d),
    ]
)
_DFA = _BoxType(
    [
        ("table", types.int32[:, ::1]),
        ("viable", _b1_2d),
        ("accept", _b1),
        ("done", _b1),
        *((name, _i64) for name in ("m_ptr", "mem", "hkey", "hcode", "push_start")),
        *((name, _i64) for name in ("push_count", "push_rule", "push_ret", "meta")),
    ]
)
_PDA = _BoxType(
    [
        *((name, _i64) for name in ("st_g", "st_parent", "st_depth", "st_hkey", "set_ptr")),
        *((name, _i64) for name in ("set_mem", "set_hkey", "set_hcode", "cl_start")),
        ("cl_len", _i64),
        ("cl_complete", _b1),
        *((name, _i64) for name in ("cl_mem", "step_keys", "step_vals", "mark", "work")),
        ("buf", _i64),
        ("meta", _i64),
    ]
)

_TRIE = _BoxType(
    [("ids", _i64), ("data", types.uint8[::1]), ("ptr", _i64), ("lcp", _i64)]
    + [("group", _i64), ("ends", _i64)]
)
_LAYOUT = _BoxType(
    [("exits", _i64), ("full", types.uint32[::1]), ("rows", _i64), ("lcp", _i64)]
    + [("group", _i64), ("in_mask", _b1), ("suffix_of", _i64), ("suffixes", _TRIE)]
    + [("run_end", _i64)]
)


@njit(cache=True, nogil=True)
def nfa_of(t):
    """The box of NFAArrays `t`, or of the plain tuple of its arrays in its order (as
    nfa_passes makes them, in compiled code)."""
    b = structref.new(_NFA)
    b.eps_ptr, b.eps_idx, b.important, b.final = t[0], t[1], t[2], t[3]
    b.e_ptr, b.e_byte, b.e_mask, b.e_tgt = t[4], t[5], t[6], t[7]
    b.masks, b.nt_ptr, b.nt_rule, b.nt_tgt = t[8], t[9], t[10], t[11]
    b.first, b.mark, b.stack, b.buf, b.pairs = t[12], t[13], t[14], t[15], t[16]
    b.edge_bits, b.edge_tgts, b.classes = t[17], t[18], t[19]
    return b


@njit(cache=True, nogil=True)
def _nfa_fields(b):
    return (
        b.eps_ptr, b.eps_idx, b.important, b.final, b.e_ptr, b.e_byte, b.e_mask, b.e_tgt,
        b.masks, b.nt_ptr, b.nt_rule, b.nt_tgt, b.first, b.mark, b.stack, b.buf, b.pairs,
        b.edge_bits, b.edge_tgts, b.classes,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _dfa(t):
    b = structref.new(_DFA)
    b.table, b.viable, b.accept, b.done = t.table, t.viable, t.accept, t.done
    b.m_ptr, b.mem, b.hkey, b.hcode = t.m_ptr, t.mem, t.hkey, t.hcode
    b.push_start, b.push_count, b.push_rule = t.push_start, t.push_count, t.push_rule
    b.push_ret, b.meta = t.push_ret, t.meta
    return b


@njit(cache=True, nogil=True)
def _pda(t):
    b = structref.new(_PDA)
    b.st_g, b.st_parent, b.st_depth, b.st_hkey = t.st_g, t.st_parent, t.st_depth, t.st_hkey
    b.set_ptr, b.set_mem, b.set_hkey = t.set_ptr, t.set_mem, t.set_hkey
    b.set_hcode, b.cl_start, b.cl_len = t.set_hcode, t.cl_start, t.cl_len
    b.cl_complete, b.cl_mem = t.cl_complete, t.cl_mem
    b.step_keys, b.step_vals, b.mark, b.work = t.step_keys, t.step_vals, t.mark, t.work
    b.buf, b.meta = t.buf, t.meta
    return b


@njit(cache=True, nogil=True)
def _trie(t):
    b = structref.new(_TRIE)
    b.ids, b.data, b.ptr, b.lcp, b.group, b.ends = t.ids, t.data, t.ptr, t.lcp, t.group, t.ends
    return b


@njit(cache=True, nogil=True)
def _layout(t):
    b = structref.new(_LAYOUT)
    b.exits, b.full, b.rows, b.lcp, b.group = t.exits, t.full, t.rows, t.lcp, t.group
    b.in_mask, b.suffix_of, b.run_end = t.in_mask, t.suffix_of, t.run_end
    b.suffixes = _trie(t.suffixes)
    return b


def nfa_box(arrays):
    """The box of a lazydfa.NFAArrays."""
    return fastcall.call(nfa_of, arrays)


def nfa_arrays(box):
    """The lazydfa.NFAArrays a box holds (handing 20 arrays to Python: ~10 µs)."""
    return NFAArrays(*fastcall.call(_nfa_fields, box))


def dfa_box(arrays):
    """The box of a lazydfa.DFAArrays."""
    return fastcall.call(_dfa, arrays)


def pda_box(arrays):
    """The box of a pda.PDAArrays."""
    return fastcall.call(_pda, arrays)


def trie_box(trie):
    """The box of a vocabulary.TokenTrie."""
    return fastcall.call(_trie, trie)


def layout_box(layout):
    """The box of a vocabulary.ChainLayout (its suffixes' trie boxed inside)."""
    return fastcall.call(_layout, layout)


# RADIXGEN_NO_JIT: the kernels are Python, and the tuples are their boxes (the box types above
# are defined all the same: numba's disk caches of the kernels name them)
if not kernel_njit.__module__.startswith("numba"):

    def nfa_box(arrays):
        return arrays

    def nfa_of(t):  # as nfa_passes calls it, with a plain tuple
        return NFAArrays(*t)

    def nfa_arrays(box):
        return box

    def dfa_box(arrays):
        return arrays

    def pda_box(arrays):
        return arrays

    def trie_box(trie):
        return trie

    def layout_box(layout):
        return layout
