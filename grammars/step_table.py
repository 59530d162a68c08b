"""The memoised steps of a grammar's pushdown automaton (stack set, byte -> stack set) mirrored
in arrays, so that compiled code can walk many tokens through them: an open-addressing hash
table filled from the steps Python has made, and the kernel that checks a mask's candidate
tokens in trie order (CompiledGrammar._check_candidates), returning to Python for each step
not made yet."""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = -1


@njit(cache=True, nogil=True)
def _slot(keys, key):
    """The slot of `key` in `keys`, or of the empty slot where it would go."""
    mask = keys.shape[0] - 1
    h = (key ^ (key >> 8) ^ (key >> 20)) & mask
    while keys[h] != key and keys[h] != _EMPTY:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def _put(keys, vals, key, val):
    h = _slot(keys, key)
    vals[h] = val
    keys[h] = key


@njit(cache=True, nogil=True)
def _put_all(keys, vals, src_keys, src_vals):
    for i in range(src_keys.shape[0]):
        _put(keys, vals, src_keys[i], src_vals[i])


class StepTable:
    """key (stack set << 8 | byte) -> next stack set, kept at most half full. Steps are put in
    a Python list first and moved into the arrays, all at once, when the arrays are asked for
    (one compiled call for many steps rather than one each)."""

    def __init__(self, capacity: int = 1024):
        self.keys = np.full(capacity, _EMPTY, np.int64)
        self.vals = np.zeros(capacity, np.int64)
        self.size = 0
        self._new: list[int] = []  # key, value, key, value, ...: not in the arrays yet

    def put(self, key: int, val: int) -> None:
        self._new += (key, val)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vals) holding every step put so far."""
        if self._new:
            new = np.array(self._new, np.int64)
            self._new = []
            size = self.size + len(new) // 2
            if 2 * size > len(self.keys):
                capacity = 2 * len(self.keys)
                while 2 * size > capacity:
                    capacity *= 2
                used = self.keys != _EMPTY
                keys = np.full(capacity, _EMPTY, np.int64)
                vals = np.zeros(capacity, np.int64)
                _put_all(keys, vals, self.keys[used], self.vals[used])
                self.keys, self.vals = keys, vals
            _put_all(self.keys, self.vals, new[0::2], new[1::2])
            self.size = size
        return self.keys, self.vals


@njit(cache=True, nogil=True)
def check_rows(rows, shared, data, ptr, keys, vals, states, found, pending, missing, meta):
    """Walk the trie rows `rows` (sorted; shared[k]: the bytes row k shares with row k - 1)
    through the steps in keys/vals, each from the state after the bytes it shares with the row
    before (states[d]: the state after d bytes of the row walked last; states[0] the start).
    A row that dies, or reaches a step not made yet, stops there, and so do the rows after it
    that share the prefix up to that byte. The rows read to the end are appended to `found`
    (meta[0] of them in all); those that stopped at a missing step go to `pending` (their
    number is returned), and each missing step once per stopped prefix to `missing` (rows of
    state, byte; meta[1] of them): make the steps, then call again on the pending rows."""
    stop = 1 << 30  # the length of the prefix at which the row walked last stopped
    blocked = False  # whether it stopped at a missing step (or died)
    n_found, n_missing, n_pending = meta[0], 0, 0
    for k in range(rows.shape[0]):
        common = shared[k]
        if common >= stop:
            if blocked:
                pending[n_pending] = rows[k]
                n_pending += 1
            continue
        stop = 1 << 30
        top = common + 1
        cur = states[common]
        row = rows[k]
        alive = True
        for i in range(ptr[row] + common, ptr[row + 1]):
            b = data[i]
            h = _slot(keys, cur << 8 | b)
            if keys[h] == _EMPTY:
                missing[n_missing, 0] = cur
                missing[n_missing, 1] = b
                n_missing += 1
                pending[n_pending] = row
                n_pending += 1
                stop, blocked, alive = top, True, False
                break
            cur = vals[h]
            if cur == 0:
                stop, blocked, alive = top, False, False
                break
            states[top] = cur
            top += 1
        if alive:
            found[n_found] = row
            n_found += 1
    meta[0] = n_found
    meta[1] = n_missing
    return n_pending
