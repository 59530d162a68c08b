"""The token walk of grammar.py compiled with numba when it is installed (a plain loop over each
token's bytes through the dense byte table; numpy column walks are the fallback)."""

from __future__ import annotations

import os

import numpy as np

try:
    if os.environ.get("RADIXGEN_NO_JIT"):
        raise ImportError("disabled by RADIXGEN_NO_JIT")
    from numba import njit
except ImportError:  # numba is a dependency, but the numpy walk stays as the fallback
    njit = None

AVAILABLE = njit is not None

if AVAILABLE:

    @njit(cache=True, nogil=True)
    def _walk(
        table, done, viable, accept, g, sel, cols, lengths, can_pop, track, final, viab, need
    ):
        """Walk rows `sel` of a layout from state g. final[j] = end state of row sel[j] (0 dead,
        -1 stopped at a state not built yet, whose id goes to `need`); viab[j] = it passed,
        after its first byte, a state where a push or pop could continue it."""
        n_need = 0
        for j in range(sel.shape[0]):
            r = sel[j]
            s = g
            v = False
            for i in range(lengths[r]):
                if not done[s]:
                    need[n_need] = s
                    n_need += 1
                    s = -1
                    break
                b = cols[i, r]
                if track and i > 0 and (viable[s, b] or (can_pop and accept[s])):
                    v = True
                s = table[s, b]
                if s == 0:
                    break
            final[j] = s
            viab[j] = v
        return n_need


def walk(machine, g: int, can_pop: bool, layout, sel: np.ndarray):
    """(alive ids, candidate ids) for the rows `sel` of `layout`, building DFA states on the
    way (the compiled loop stops at unbuilt states; they are built and those tokens rerun)."""
    ids, cols, lengths = layout
    sel = np.asarray(sel, np.int64)
    final = np.empty(len(sel), np.int64)
    viab = np.zeros(len(sel), np.bool_)
    track = bool(machine.has_pushes or can_pop)
    pos = None  # positions of sel still to (re)walk; None = all
    while True:
        rows = sel if pos is None else sel[pos]
        out_final = final if pos is None else np.empty(len(rows), np.int64)
        out_viab = viab if pos is None else np.zeros(len(rows), np.bool_)
        need = np.empty(len(rows), np.int64)
        n = _walk(
            machine.table,
            machine.done,
            machine.viable,
            machine.accept,
            int(g),
            rows,
            cols,
            lengths,
            bool(can_pop),
            track,
            out_final,
            out_viab,
            need,
        )
        if pos is not None:
            final[pos] = out_final
            viab[pos] = out_viab
        if not n:
            break
        for x in set(need[:n].tolist()):
            machine.materialize(x)
        pos = np.nonzero(final == -1)[0]
    return ids[sel[final != 0]], ids[sel[(final == 0) & viab]]
