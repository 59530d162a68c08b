"""Passes over the NFA of a whole grammar before it is frozen into arrays (grammar.Machine):
prune what cannot finish, refuse left recursion, and find the bytes that can start each rule.

`starts[r]` and `finals[r]` are the NFA states where rule r begins and ends; rule references
are the NFA's `nts` edges, by rule name (`rule_index` numbers the names).
"""

from __future__ import annotations

import numpy as np

from grammars.automaton import ALL_BYTES, NFA, mask_bytes
from grammars.budget import checkpoint
from grammars.errors import GrammarError


def prune(nfa: NFA, rule_index: dict[str, int], root: int, starts, finals) -> None:
    """Remove every NFA state that cannot reach its rule's end, and references to rules that
    cannot match anything (GrammarError when the root rule is one of them)."""
    n = len(nfa.eps)
    rev: list[list[int]] = [[] for _ in range(n)]
    checkpoint()
    nt_rev: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s in range(n):
        if not s & 4095:
            checkpoint()
        for t in nfa.eps[s]:
            rev[t].append(s)
        for _, t in nfa.edges[s]:
            rev[t].append(s)
        for name, t in nfa.nts[s]:
            nt_rev[t].append((rule_index[name], s))
    # live states and productive rules grow together: a reference to a rule is followed
    # backwards once the rule's start is live; references met before wait for that
    rule_of_start = {s: r for r, s in enumerate(starts)}
    productive: set[int] = set()
    waiting: dict[int, list[int]] = {}
    live = set(finals)
    todo = list(finals)
    popped = 0
    while todo:
        popped += 1
        if not popped & 4095:
            checkpoint()
        t = todo.pop()
        found = list(rev[t])
        for r, s in nt_rev[t]:
            if r in productive:
                found.append(s)
            else:
                waiting.setdefault(r, []).append(s)
        while found:
            s = found.pop()
            if s in live:
                continue
            live.add(s)
            todo.append(s)
            r = rule_of_start.get(s)
            if r is not None and r not in productive:
                productive.add(r)
                found.extend(waiting.pop(r, ()))
    if root not in productive:
        raise GrammarError("the constraint admits no value at all")
    for s in range(n):
        if not s & 4095:
            checkpoint()
        if s not in live:
            nfa.eps[s], nfa.edges[s], nfa.nts[s] = [], [], []
            continue
        nfa.eps[s] = [t for t in nfa.eps[s] if t in live]
        nfa.edges[s] = [(m, t) for m, t in nfa.edges[s] if t in live]
        nfa.nts[s] = [(nm, t) for nm, t in nfa.nts[s] if t in live and rule_index[nm] in productive]
    nfa._closures.clear()


def check_left_recursion(nfa: NFA, rule_index: dict[str, int], names, starts, finals) -> None:
    """GrammarError naming a rule that can reach itself without reading a byte."""
    nullable: set[int] = set()
    changed = True
    while changed:
        changed = False
        for r, s in enumerate(starts):
            if r not in nullable and finals[r] in _eps_reach(nfa, rule_index, s, nullable):
                nullable.add(r)
                changed = True
    calls = {}
    for r, s in enumerate(starts):
        reach = _eps_reach(nfa, rule_index, s, nullable)
        calls[r] = {rule_index[nm] for x in reach for nm, _ in nfa.nts[x]}
    for r in range(len(starts)):
        checkpoint()
        seen, todo = set(), list(calls[r])
        while todo:
            x = todo.pop()
            if x == r:
                raise GrammarError(f"left recursion in rule {names[r]!r}")
            if x not in seen:
                seen.add(x)
                todo.extend(calls[x])


def _eps_reach(nfa: NFA, rule_index: dict[str, int], s: int, nullable: set[int]) -> set[int]:
    """States reachable from s through empty moves and references to rules that can be empty."""
    seen, todo = {s}, [s]
    popped = 0
    while todo:
        popped += 1
        if not popped & 4095:
            checkpoint()
        x = todo.pop()
        nxt = list(nfa.eps[x]) + [t for nm, t in nfa.nts[x] if rule_index[nm] in nullable]
        for t in nxt:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def first_bytes(nfa: NFA, rule_index: dict[str, int], starts, finals) -> np.ndarray:
    """first[r, b]: byte b can start rule r (every byte when r can be empty, since then what
    follows counts)."""
    masks: dict[int, int] = {}

    def first_of(r: int) -> int:
        if r in masks:
            return masks[r]
        checkpoint()
        masks[r] = ALL_BYTES  # conservative while computing (recursion)
        members = nfa.closure([starts[r]])
        mask = 0
        if finals[r] in members:
            mask = ALL_BYTES
        else:
            for n in members:
                for m, _ in nfa.edges[n]:
                    mask |= m
                for name, _ in nfa.nts[n]:
                    mask |= first_of(rule_index[name])
        masks[r] = mask
        return mask

    out = np.zeros((len(starts), 256), bool)
    for r in range(len(starts)):
        out[r, mask_bytes(first_of(r))] = True
    return out
