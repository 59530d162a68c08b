"""Stacks that read every token alike, so that the candidate checks of masks are shared.

A mask's candidate tokens (those that leave the frame on top, grammar.CompiledGrammar) are
checked through the pushdown automaton from the exact stack. Two stacks with the same frame on
top read every token alike when the stacks below them do, and a stack below, seen from a token
of at most `horizon` bytes (the vocabulary's longest), is described by its parent (exactly) and
its own state's moves: whether it may end, where each byte leads, and which rules it pushes,
with the state each returns to, except where the rule's every string has at least `horizon`
bytes (a token read into such a rule never returns from it, so the state it would return to
never matters).

That is what makes strings of thousands of characters cheap (json_schema/counted.py counts them
in pushed blocks of 128): at every position of every block the stack below differs (the number
of blocks so far), but those stacks read tokens alike, so the tokens crossing a block's end are
checked once per position of a block, not once per position of the string.
"""

from __future__ import annotations

import numpy as np

_MAX_SIGNATURES = 4096  # distinct state signatures kept, then every memo starts over
_MAX_CHECKED_BYTES = 8 << 20  # candidate ids kept


def no_string_shorter(machine, start: int, n: int) -> bool:
    """Whether no string read from DFA state `start` to a state where its rule may end has
    fewer than n bytes (rules it pushes counted as empty: a lower bound). A breadth-first walk
    of at most n levels, building the states it meets."""
    seen, level = {start}, [start]
    for _ in range(n):
        i = 0
        while i < len(level):  # the states a push's return adds at no cost
            s = level[i]
            i += 1
            machine.live(s)  # built: its row and pushes
            dfa = machine.dfa
            if dfa.accept[s]:
                return False
            first = int(dfa.push_start[s])
            for t in dfa.push_ret[first : first + int(dfa.push_count[s])].tolist():
                if t not in seen:
                    seen.add(t)
                    level.append(t)
        table = machine.dfa.table
        targets = np.unique(table[np.array(level)]).tolist()
        level = [t for t in targets if t and t not in seen]
        seen.update(level)
        if not level:  # nothing new within reach: no accepting state at all
            return True
    return True


class SharedChecks:
    """The candidate checks of one compiled grammar, memoised by (frame state, behaviour of the
    stack below). Called under the grammar's lock."""

    def __init__(self, grammar, horizon: int):
        self.grammar, self.horizon = grammar, horizon
        self.checked: dict[tuple, np.ndarray] = {}
        self.checked_bytes = 0
        self.behaviours: dict[int, tuple | int] = {}  # stack -> behaviour key
        self.signatures: dict[int, int] = {}  # DFA state -> signature number
        self.signature_ids: dict[tuple, int] = {}
        self.long_rules: dict[int, bool] = {}  # rule number -> every string >= horizon bytes

    def found(self, sid: int, g: int, parent: int, candidates: np.ndarray, check) -> np.ndarray:
        """The ids of `candidates` (tokens leaving frame state g of stack sid) that stack sid
        reads to the end: check(sid, candidates) once per (g, behaviour of parent)."""
        key = (g, self.behaviour(parent))
        hit = self.checked.get(key)
        if hit is None:
            hit = check(sid, candidates)
            if self.checked_bytes + hit.nbytes > _MAX_CHECKED_BYTES:
                self.checked.clear()
                self.checked_bytes = 0
            self.checked[key] = hit
            self.checked_bytes += hit.nbytes
        return hit

    def behaviour(self, sid: int) -> tuple | int:
        if sid < 0:
            return -1
        hit = self.behaviours.get(sid)
        if hit is None:
            g, parent = self.grammar._frame(sid)
            hit = self.behaviours[sid] = (self.signature(g), parent)
        return hit

    def signature(self, g: int) -> int:
        """A number shared by the DFA states whose moves are alike (see the module's doc)."""
        hit = self.signatures.get(g)
        if hit is not None:
            return hit
        machine = self.grammar.machine
        machine.live(g)  # materialised: its row and pushes
        dfa = machine.dfa
        start, count = int(dfa.push_start[g]), int(dfa.push_count[g])
        rules = dfa.push_rule[start : start + count].tolist()
        returns = dfa.push_ret[start : start + count].tolist()
        pushes = tuple((r, -1 if self._long(r) else t) for r, t in zip(rules, returns))
        key = (bool(dfa.accept[g]), dfa.table[g].tobytes(), pushes)
        if len(self.signature_ids) >= _MAX_SIGNATURES:  # numbers are about to be reused
            self.signature_ids.clear()
            self.signatures.clear()
            self.behaviours.clear()
            self.checked.clear()
            self.checked_bytes = 0
        hit = self.signatures[g] = self.signature_ids.setdefault(key, len(self.signature_ids))
        return hit

    def _long(self, rule: int) -> bool:
        hit = self.long_rules.get(rule)
        if hit is None:
            machine = self.grammar.machine
            start = int(machine.rule_start[rule])
            hit = self.long_rules[rule] = no_string_shorter(machine, start, self.horizon)
        return hit
