"""The exact check of the tokens that leave a frame, in one compiled call.

A mask's walk of a frame (lazydfa_walk.walk) ends with candidates: tokens that died after
passing a state where a pop or a push could have saved them. Each is read again, from the
stack below alone where it only leaves by a pop (pda.check_pops), from the whole stack
otherwise (pda.check_rows). The steps of that check were seven or eight compiled calls with
Python between them (~30 µs of a new mask's ~270, Llama-3): here they are one.
"""

from __future__ import annotations

import numpy as np

from grammars.lazydfa import njit, sorted_rows
from grammars.lazydfa_walk import set_bits, unset_of
from grammars.pda import check_pops, check_rows, single_of


@njit(cache=True, nogil=True)
def checked_leaving(
    nfa, dfa, pda, rule_start, sid, g, parent, follow, candidates, words, in_place, trie, out
):
    """The `candidates` (token ids leaving frame state g of stack sid; parent: the stack below,
    -1 for none, which reads the bytes of `follow`) that stack sid reads to the end, into
    `out`: their number, or an error code (pda's). With in_place, the candidates already set
    in `words` are skipped and those found are set there. `trie`: (data, ptr, ids, row_of) of
    the vocabulary's trie."""
    data, ptr, ids, row_of = trie
    if in_place:
        candidates = unset_of(words, candidates)
    n = 0
    if parent >= 0 and candidates.shape[0]:  # those that only leave by a pop: from below
        rows, shared = sorted_rows(row_of, candidates, data, ptr)
        below = single_of(nfa, dfa, pda, rule_start, parent)
        if below < 0:
            return below
        verdict = np.empty(rows.shape[0], np.int8)
        code = check_pops(
            nfa, dfa, pda, rule_start, g, below, follow, rows, shared, data, ptr, verdict
        )
        if code < 0:
            return code
        rest = np.empty(rows.shape[0], np.int64)
        m = 0
        for k in range(rows.shape[0]):
            if verdict[k] == 1:
                out[n] = ids[rows[k]]
                n += 1
            elif verdict[k] == 2:  # a push could continue it: the whole stack decides
                rest[m] = ids[rows[k]]
                m += 1
        candidates = rest[:m]
    if candidates.shape[0]:
        ss = single_of(nfa, dfa, pda, rule_start, sid)
        if ss < 0:
            return ss
        rows, shared = sorted_rows(row_of, candidates, data, ptr)
        found = np.empty(rows.shape[0], np.int64)
        longest = 0
        for row in rows:
            longest = max(longest, ptr[row + 1] - ptr[row])
        states = np.empty(longest + 1, np.int64)
        states[0] = ss
        k = check_rows(nfa, dfa, pda, rule_start, rows, shared, data, ptr, states, found)
        if k < 0:
            return k
        for i in range(k):
            out[n] = ids[found[i]]
            n += 1
    if in_place:
        set_bits(words, out[:n])
    return n
