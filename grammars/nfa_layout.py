"""An NFA's moves laid out by source state in one compiled call: its own moves, the moves of
each fragment use (the first build's moves on the use's states, see grammars.fragments) and of
each embedded DFA copy (the DFA's moves offset by the copy's first state), placed by a stable
counting sort into CSR arrays (a pointer per state into the moves that leave it).

Own moves come first in each state's list, then the uses', then the copies', each in order."""

from __future__ import annotations

import numpy as np

from grammars.lazydfa import njit

# the columns of a row of `uses`: the first build's slices of the own eps, edge and rule-move
# arrays, its from and to states and first state; the use's first state, from and to
USE_COLUMNS = 12
# the columns of a row of `copies`: the DFA (its index among the records), first state, from, to
COPY_COLUMNS = 4


@njit(cache=True, nogil=True)
def _mapped(x, u):
    """State x of a fragment's first build, on the states of use u."""
    if x == u[6]:
        return u[10]
    if x == u[7]:
        return u[11]
    return x + u[9] - u[8]


@njit(cache=True, nogil=True)
def by_source(n, src, cols):
    """(ptr, cols reordered by source state, keeping the order within a state)."""
    ptr = np.zeros(n + 1, np.int64)
    for s in src:
        ptr[s + 1] += 1
    for s in range(n):
        ptr[s + 1] += ptr[s]
    fill = ptr[:-1].copy()
    out = np.empty_like(cols)
    for i in range(src.shape[0]):
        at = fill[src[i]]
        for c in range(cols.shape[0]):
            out[c, at] = cols[c, i]
        fill[src[i]] = at + 1
    return ptr, out


@njit(cache=True, nogil=True)
def layout(n, eps, edges, nts, uses, copies, ints, records):
    """eps (k, 2): from, to; edges (k, 3): from, mask id, to; nts (k, 3): from, rule, return
    state; uses (k, USE_COLUMNS); copies (k, COPY_COLUMNS); DFA d's record (see laid_out) is
    read in place from ints[records[d, 0]:], and its own mask ids i are records[d, 1] + i.
    Returns the CSR arrays (eps_ptr, eps_to, e_ptr, e_cols (mask id, to), nt_ptr, nt_cols
    (rule, return state))."""
    n_eps, n_e, n_nt = eps.shape[0], edges.shape[0], nts.shape[0]
    for u in uses:
        n_eps += u[1] - u[0]
        n_e += u[3] - u[2]
        n_nt += u[5] - u[4]
    for c in copies:
        at = records[c[0], 0]
        n_eps += 1 + ints[at + 1]
        n_e += ints[at]
    all_eps = np.empty((2, n_eps), np.int64)
    all_e = np.empty((3, n_e), np.int64)
    all_nt = np.empty((3, n_nt), np.int64)
    all_eps[:, : eps.shape[0]] = eps.T
    all_e[:, : edges.shape[0]] = edges.T
    all_nt[:, : nts.shape[0]] = nts.T
    i, j, k = eps.shape[0], edges.shape[0], nts.shape[0]
    for u in uses:
        for m in range(u[0], u[1]):
            all_eps[0, i] = _mapped(eps[m, 0], u)
            all_eps[1, i] = _mapped(eps[m, 1], u)
            i += 1
        for m in range(u[2], u[3]):
            all_e[0, j] = _mapped(edges[m, 0], u)
            all_e[1, j] = edges[m, 1]
            all_e[2, j] = _mapped(edges[m, 2], u)
            j += 1
        for m in range(u[4], u[5]):
            all_nt[0, k] = _mapped(nts[m, 0], u)
            all_nt[1, k] = nts[m, 1]
            all_nt[2, k] = _mapped(nts[m, 2], u)
            k += 1
    for c in copies:
        at, first_mask = records[c[0], 0], records[c[0], 1]
        n_moves, n_acc, start, base = ints[at], ints[at + 1], ints[at + 2], c[1]
        src, ids, tgt = at + 4, at + 4 + n_moves, at + 4 + 2 * n_moves
        all_eps[0, i] = c[2]
        all_eps[1, i] = base + start
        i += 1
        for m in range(tgt + n_moves, tgt + n_moves + n_acc):
            all_eps[0, i] = base + ints[m]
            all_eps[1, i] = c[3]
            i += 1
        for m in range(n_moves):
            all_e[0, j] = base + ints[src + m]
            all_e[1, j] = first_mask + ints[ids + m]
            all_e[2, j] = base + ints[tgt + m]
            j += 1
    eps_ptr, eps_to = by_source(n, all_eps[0], all_eps[1:])
    e_ptr, e_cols = by_source(n, all_e[0], all_e[1:])
    nt_ptr, nt_cols = by_source(n, all_nt[0], all_nt[1:])
    return eps_ptr, eps_to[0], e_ptr, e_cols, nt_ptr, nt_cols


@njit(cache=True, nogil=True)
def laid_out(ints, sizes, mask_bytes):
    """layout's moves, then mask_columns' per-edge columns for `mask_bytes` (the NFA's own
    masks, then each DFA's, as packed rows): NFAGraph's fields in order. `ints` holds, end to
    end, the NFA's empty moves, byte moves, rule moves, fragment uses and DFA copies (their
    lengths sizes[1:6], the NFA's size sizes[0]), then sizes[6] DFA records, each its number
    of moves k, of accepting states a, its start and its number of masks, then its (3, k)
    move table row by row and its a accepting states; sizes[7]: the number of the NFA's own
    masks."""
    n, n_dfas = sizes[0], sizes[6]
    parts = []
    at = 0
    for i in range(1, 6):
        parts.append(ints[at : at + sizes[i]])
        at += sizes[i]
    records = np.empty((n_dfas, 2), np.int64)  # where each record starts, its first mask id
    first_mask = sizes[7]
    for d in range(n_dfas):
        records[d, 0], records[d, 1] = at, first_mask
        first_mask += ints[at + 3]
        at += 4 + 3 * ints[at] + ints[at + 1]
    eps_ptr, eps_to, e_ptr, e_cols, nt_ptr, nt_cols = layout(
        n,
        parts[0].reshape(-1, 2),
        parts[1].reshape(-1, 3),
        parts[2].reshape(-1, 3),
        parts[3].reshape(-1, USE_COLUMNS),
        parts[4].reshape(-1, COPY_COLUMNS),
        ints,
        records,
    )
    e_byte, e_mask, words = mask_columns(mask_bytes, e_cols[0])
    return eps_ptr, eps_to, e_ptr, e_byte, e_mask, e_cols[1], words, nt_ptr, nt_cols[0], nt_cols[1]


@njit(cache=True, nogil=True)
def mask_columns(mask_bytes, edge_ids):
    """The distinct byte masks (k, 32) little-endian, and each edge's mask id: per edge its
    byte (-1 where the mask holds several) and its row of `words` (-1 where it holds one), and
    `words`, the masks of several bytes as four 64-bit words (byte b: bit b & 63 of word
    b >> 6; at least one row), as lazydfa.materialize splits byte classes."""
    k = mask_bytes.shape[0]
    byte_of = np.full(k, -1, np.int64)
    row_of = np.full(k, -1, np.int64)
    wide = 0
    for m in range(k):
        bits, last = 0, -1
        for i in range(32):
            v = mask_bytes[m, i]
            if v:
                if bits or v & (v - 1):  # a second byte: no need to count further
                    bits = 2
                    break
                bits, last = 1, 8 * i + _low_bit(v)
        if bits == 1:
            byte_of[m] = last
        else:
            row_of[m] = wide
            wide += 1
    words = np.zeros((max(1, wide), 4), np.uint64)
    for m in range(k):
        r = row_of[m]
        if r >= 0:
            for i in range(32):
                words[r, i >> 3] |= np.uint64(mask_bytes[m, i]) << np.uint64(8 * (i & 7))
    e_byte = np.empty(edge_ids.shape[0], np.int64)
    e_mask = np.empty(edge_ids.shape[0], np.int64)
    for j in range(edge_ids.shape[0]):
        e_byte[j] = byte_of[edge_ids[j]]
        e_mask[j] = row_of[edge_ids[j]]
    return e_byte, e_mask, words


@njit(cache=True, nogil=True)
def _low_bit(v):
    i = 0
    while not (v >> i) & 1:
        i += 1
    return i
