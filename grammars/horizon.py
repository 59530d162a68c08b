"""Stacks that read every token alike, so that the candidate checks of masks are shared.

A mask's candidate tokens (those that leave the frame on top, grammar.CompiledGrammar) are
checked through the pushdown automaton from the exact stack. Two stacks with the same frame on
top read every token alike when the stacks below them do, and a stack below, seen from a token
of at most `horizon` bytes (the vocabulary's longest), is described by its parent (exactly) and
its own state's moves: whether it may end, where each byte leads, and which rules it pushes,
with the state each returns to, except where the rule's every string has at least `horizon`
bytes (a token read into such a rule never returns from it, so the state it would return to
never matters). Only rules that are one embedded DFA are measured (Machine.dfa_min_lengths);
checks are shared only below states that push such a long rule, and elsewhere run as before,
skipping the tokens another stack of the mask already allowed.

That is what makes strings of thousands of characters cheap (json_schema/counted.py counts them
in pushed blocks of 256): at every position of every block the stack below differs (the number
of blocks so far), but those stacks read tokens alike, so the tokens crossing a block's end are
checked once per position of a block, not once per position of the string.
"""

from __future__ import annotations

import numpy as np

_MAX_SIGNATURES = 4096  # distinct state signatures kept, then every memo starts over
_MAX_CHECKED_BYTES = 8 << 20  # candidate ids kept


def dfa_min_length(dfa) -> int:
    """The shortest accepted length in bytes of an EagerDFA (1 << 40 where it accepts
    nothing), kept on it: the DFAs of counted strings are shared by every grammar using them."""
    hit = getattr(dfa, "_min_length", None)
    if hit is None:
        trans, accept = dfa.trans, dfa.accept
        seen, level, hit = {dfa.start}, [dfa.start], 0
        while level and not any(accept[s] for s in level):
            level = [t for s in level for _, t in trans[s] if t not in seen and not seen.add(t)]
            hit += 1
        hit = dfa._min_length = hit if level else 1 << 40
    return hit


class SharedChecks:
    """The candidate checks of one compiled grammar, memoised by (frame state, behaviour of the
    stack below), where the stack below may push a rule longer than every token (the only
    case where stacks that differ read tokens alike, in practice). Called under the grammar's
    lock."""

    def __init__(self, machine, horizon: int):
        lengths = machine.dfa_min_lengths
        self.long = {rule for rule, n in lengths.items() if n >= horizon}
        self.checked: dict[tuple, np.ndarray] = {}
        self.checked_bytes = 0
        self.pushes_long: dict[int, bool] = {}  # DFA state -> it pushes a rule of self.long
        self.behaviours: dict[int, tuple | int] = {}  # stack -> behaviour key
        self.signatures: dict[int, int] = {}  # DFA state -> signature number
        self.signature_ids: dict[tuple, int] = {}

    def applies(self, grammar, parent: int) -> bool:
        """Whether the stack below (-1: none) may push a rule longer than every token."""
        if not self.long or parent < 0:
            return False
        g = grammar._frame(parent)[0]
        hit = self.pushes_long.get(g)
        if hit is None:
            rules, _ = _pushes(grammar.machine, g)
            hit = self.pushes_long[g] = any(r in self.long for r in rules)
        return hit

    def found(self, grammar, sid, g, parent, follow, candidates) -> np.ndarray:
        """The ids of `candidates` (tokens leaving frame state g of stack sid, whose stack
        below, `parent`, reads the bytes of `follow`) that stack sid reads to the end:
        grammar._checked_leaving once per (g, behaviour of parent)."""
        key = (g, self.behaviour(grammar, parent))
        hit = self.checked.get(key)
        if hit is None:
            hit = grammar._checked_leaving(sid, g, parent, follow, candidates)
            if self.checked_bytes + hit.nbytes > _MAX_CHECKED_BYTES:
                self.checked.clear()
                self.checked_bytes = 0
            self.checked[key] = hit
            self.checked_bytes += hit.nbytes
        return hit

    def behaviour(self, grammar, sid: int) -> tuple | int:
        if sid < 0:
            return -1
        hit = self.behaviours.get(sid)
        if hit is None:
            g, parent = grammar._frame(sid)
            hit = self.behaviours[sid] = (self.signature(grammar.machine, g), parent)
        return hit

    def signature(self, machine, g: int) -> int:
        """A number shared by the DFA states whose moves are alike (see the module's doc)."""
        hit = self.signatures.get(g)
        if hit is not None:
            return hit
        rules, returns = _pushes(machine, g)
        pushes = tuple((r, -1 if r in self.long else t) for r, t in zip(rules, returns))
        dfa = machine.dfa
        key = (bool(dfa.accept[g]), dfa.table[g].tobytes(), pushes)
        if len(self.signature_ids) >= _MAX_SIGNATURES:  # numbers are about to be reused
            self.signature_ids.clear()
            self.signatures.clear()
            self.behaviours.clear()
            self.checked.clear()
            self.checked_bytes = 0
        hit = self.signatures[g] = self.signature_ids.setdefault(key, len(self.signature_ids))
        return hit


def _pushes(machine, g: int) -> tuple[list[int], list[int]]:
    """The rules DFA state g pushes and the states they return to (g built first)."""
    machine.live(g)
    dfa = machine.dfa
    start, stop = int(dfa.push_start[g]), int(dfa.push_start[g] + dfa.push_count[g])
    return dfa.push_rule[start:stop].tolist(), dfa.push_ret[start:stop].tolist()
