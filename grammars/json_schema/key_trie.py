"""The moves of strings.key_except's DFA in one compiled call: the trie of the excluded names
and every trie node's moves, laid out after key_node()'s own moves (strings._KeyParts holds
what every such DFA shares). A Python loop over the trie's nodes had cost ~80 µs a call for
the ~50 nodes of a median schema's property names, the largest part of building its rules.

Moves that only a node with several children has (its narrowed moves less the children's
bytes) need masks the shared numbering may not hold: the kernel keeps them as pending masks
(128 bits in two words: names are printable ASCII), numbers them after the known ones, and
gives the masks the DFA uses as packed rows, so that the caller has no per-mask work."""

from __future__ import annotations

import numpy as np

from grammars.lazydfa import njit


@njit(cache=True, nogil=True)
def _trie(data, count):
    """The trie of `count` names (data: their bytes, each but the last followed by a quote,
    which no name holds): (nodes, each node's first child, next sibling, byte, child count and
    end flag), children in the order their bytes first occur, as a dict keeps them."""
    size = data.shape[0] + 1
    first = np.full(size, -1, np.int64)
    last = np.full(size, -1, np.int64)
    sibling = np.full(size, -1, np.int64)
    byte = np.zeros(size, np.int64)
    kids = np.zeros(size, np.int64)
    end = np.zeros(size, np.bool_)
    nodes, t = 1, 0
    for b in data:
        if b == 0x22:  # a name ends
            end[t] = True
            t = 0
            continue
        c = first[t]
        while c >= 0 and byte[c] != b:
            c = sibling[c]
        if c < 0:
            c = nodes
            nodes += 1
            byte[c] = b
            if first[t] < 0:
                first[t] = c
            else:
                sibling[last[t]] = c
            last[t] = c
            kids[t] += 1
        t = c
    if count:
        end[t] = True
    return nodes, first, sibling, byte, kids, end


@njit(cache=True, nogil=True)
def key_moves(data, count, parts, n, quote, close):
    """(moves, packed masks) of the DFA: its moves as one (3, k) array (sources, mask ids,
    targets) and the masks they use as packed_masks rows, numbered in that order, for the
    `count` names of `data` (as _trie reads them). Moves:
    key_node()'s, then each trie node's (state n + node) in node order, then the moves every
    node shares, then the start's quote into the root (state n + nodes, the last). `parts`:
    strings._KeyParts.arrays (three tuples)."""
    (base_src, base_ids, base_tgt, byte_id, one_ids, one_tgt, one_len) = parts[0]
    (leaf_ids, leaf_tgt, nar_lo, nar_hi, nar_tgt, shared_ids, shared_tgt) = parts[1]
    packed, table_keys, table_vals = parts[2]
    known = packed.shape[0]  # the known masks, numbered 0 .. known - 1
    nodes, first, sibling, byte, kids, end = _trie(data, count)
    total = base_ids.shape[0] + nodes * shared_ids.shape[0] + 1
    for t in range(nodes):
        if kids[t] == 1:
            total += one_len[byte[first[t]]]
        elif kids[t] > 1:
            total += kids[t] + nar_lo.shape[0]  # at most: a narrowed move may vanish
        else:
            total += leaf_ids.shape[0]
        if not end[t]:
            total += 1
    src = np.empty(total, np.int64)
    ids = np.empty(total, np.int64)
    tgt = np.empty(total, np.int64)
    pend_lo = np.empty(nodes * nar_lo.shape[0], np.uint64)
    pend_hi = np.empty(nodes * nar_lo.shape[0], np.uint64)
    k = base_ids.shape[0]
    src[:k] = base_src
    ids[:k] = base_ids
    tgt[:k] = base_tgt
    pending = 0
    for t in range(nodes):
        s = n + t
        if kids[t] == 1:
            c = first[t]
            b = byte[c]
            m = one_len[b]
            for j in range(m):
                src[k + j] = s
                ids[k + j] = one_ids[b, j]
            tgt[k] = n + c
            for j in range(1, m):
                tgt[k + j] = one_tgt[b, j - 1]
            k += m
        elif kids[t] > 1:
            taken_lo, taken_hi = np.uint64(0), np.uint64(0)
            c = first[t]
            while c >= 0:
                b = byte[c]
                if b < 64:
                    taken_lo |= np.uint64(1) << np.uint64(b)
                else:
                    taken_hi |= np.uint64(1) << np.uint64(b - 64)
                src[k], ids[k], tgt[k] = s, byte_id[b], n + c
                k += 1
                c = sibling[c]
            for j in range(nar_lo.shape[0]):
                lo, hi = nar_lo[j] & ~taken_lo, nar_hi[j] & ~taken_hi
                if lo != 0 or hi != 0:
                    pend_lo[pending], pend_hi[pending] = lo, hi
                    src[k], ids[k], tgt[k] = s, -1 - pending, nar_tgt[j]
                    pending += 1
                    k += 1
        else:
            for j in range(leaf_ids.shape[0]):
                src[k], ids[k], tgt[k] = s, leaf_ids[j], leaf_tgt[j]
                k += 1
        if not end[t]:
            src[k], ids[k], tgt[k] = s, quote, close
            k += 1
    for t in range(nodes):
        for j in range(shared_ids.shape[0]):
            src[k], ids[k], tgt[k] = n + t, shared_ids[j], shared_tgt[j]
            k += 1
    src[k], ids[k], tgt[k] = n + nodes, quote, n
    k += 1
    moves = np.empty((3, k), np.int64)
    moves[0] = src[:k]
    moves[1] = ids[:k]
    moves[2] = tgt[:k]
    kept = _numbered(moves[1], pend_lo[:pending], pend_hi[:pending], known, table_keys, table_vals)
    rows = np.zeros((kept.shape[0], 32), np.uint8)
    for u in range(kept.shape[0]):
        i = kept[u]
        if i < known:
            rows[u] = packed[i]
        else:  # a pending mask: its two words, little-endian
            p = i - known
            for b in range(8):
                rows[u, b] = (pend_lo[p] >> np.uint64(8 * b)) & np.uint64(255)
                rows[u, 8 + b] = (pend_hi[p] >> np.uint64(8 * b)) & np.uint64(255)
    return moves, rows


@njit(cache=True, nogil=True)
def known_table(known_lo, known_hi):
    """The hash table of the known masks (by their two words: their number), for _numbered;
    made once (strings._KeyParts), as every call reads the same masks."""
    size = 4
    while size < 2 * known_lo.shape[0]:
        size *= 2
    keys = np.empty((size, 2), np.uint64)
    vals = np.full(size, -1, np.int64)
    for j in range(known_lo.shape[0]):
        if known_lo[j] != 0 or known_hi[j] != 0:  # (0, 0): wider, never a pending mask
            _number_of(keys, vals, known_lo[j], known_hi[j], j)
    return keys, vals


@njit(cache=True, nogil=True)
def _numbered(ids, pend_lo, pend_hi, count, known_keys, known_vals):
    """Number the pending masks in place of their ids -1 - p (a known mask of the same bits,
    else the first pending one equal to it, whose number follows the known ones), then
    renumber the ids 0.. over the masks the moves use, in order of their numbers; returns those
    masks' numbers (a pending mask's: the known count + its index in the pending ones).
    `count`: the known masks' count, `known_keys` and `known_vals` their known_table."""
    p = pend_lo.shape[0]
    size = 4
    while size < 2 * p:
        size *= 2
    keys = np.empty((size, 2), np.uint64)
    vals = np.full(size, -1, np.int64)  # the pending masks not known: their number
    number = np.empty(p, np.int64)
    for i in range(p):
        j = _find(known_keys, known_vals, pend_lo[i], pend_hi[i])
        number[i] = j if j >= 0 else _number_of(keys, vals, pend_lo[i], pend_hi[i], count + i)
    new = np.zeros(count + p, np.int64)  # 1 where used, then the new number
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0:
            i = number[-1 - i]
            ids[j] = i
        new[i] = 1
    kept = np.empty(count + p, np.int64)
    u = 0
    for i in range(count + p):
        if new[i]:
            new[i] = u
            kept[u] = i
            u += 1
    for j in range(ids.shape[0]):
        ids[j] = new[ids[j]]
    return kept[:u]


@njit(cache=True, nogil=True)
def _slot(keys, vals, lo, hi):
    """The slot of mask (lo, hi) in the hash table (keys, vals): where it is, else the empty
    slot where it would go (open addressing; the table at most half full)."""
    mask = vals.shape[0] - 1
    h = lo * np.uint64(0x9E3779B97F4A7C15) ^ hi * np.uint64(0xC2B2AE3D27D4EB4F)
    s = np.int64((h ^ (h >> np.uint64(31))) & np.uint64(mask))
    while vals[s] >= 0 and not (keys[s, 0] == lo and keys[s, 1] == hi):
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True)
def _find(keys, vals, lo, hi):
    """The number of mask (lo, hi) in the hash table, -1 when it is not there."""
    return vals[_slot(keys, vals, lo, hi)]


@njit(cache=True, nogil=True)
def _number_of(keys, vals, lo, hi, number):
    """The number of mask (lo, hi) in the hash table, entered with `number` when it is not
    there yet."""
    s = _slot(keys, vals, lo, hi)
    if vals[s] < 0:
        keys[s, 0], keys[s, 1] = lo, hi
        vals[s] = number
    return vals[s]
