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
        """Walk rows `sel` of a layout from state g. final[r] = end state (0 dead, -1 stopped at
        a state not built yet, whose id goes to `need`); viab[r] = passed a push/pop point."""
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
            final[r] = s
            viab[r] = v
        return n_need


def walk(machine, g: int, can_pop: bool, layout, sel: np.ndarray):
    """(alive ids, candidate ids) for the rows `sel` of `layout`, building DFA states on the
    way (the compiled loop stops at unbuilt states; they are built and those tokens rerun)."""
    ids, cols, lengths = layout
    final = np.zeros(len(ids), np.int64)
    viab = np.zeros(len(ids), np.bool_)
    track = bool(machine.has_pushes or can_pop)
    pending = np.asarray(sel, np.int64)
    while len(pending):
        need = np.zeros(len(pending), np.int64)
        n = _walk(
            machine.table,
            machine.done,
            machine.viable,
            machine.accept,
            g,
            pending,
            cols,
            lengths,
            can_pop,
            track,
            final,
            viab,
            need,
        )
        if not n:
            break
        for x in np.unique(need[:n]).tolist():
            machine.materialize(x)
        pending = pending[final[pending] == -1]
    alive_rows = np.asarray(sel, np.int64)
    alive_rows = alive_rows[final[alive_rows] != 0]
    dead_rows = np.asarray(sel, np.int64)
    dead_rows = dead_rows[(final[dead_rows] == 0) & viab[dead_rows]]
    return ids[alive_rows], ids[dead_rows]
