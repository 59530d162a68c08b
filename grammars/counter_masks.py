"""Masks shared between positions of a length counter that no token can tell apart.

A string with a length bound is a counter (array_dfa.counter_dfa): one copy of the character
automaton per count of characters read, so every position of the string is a DFA state of its
own and every mask there a first visit (a walk of the vocabulary and checks of the tokens that
leave the string). Yet a token of at most `horizon` bytes (the vocabulary's longest) reads at
most `horizon` characters, so from count c it only sees whether c + m reaches the lower bound
and whether it reaches the upper one, for m <= horizon: two counts that agree on that for every
such m (both past the lower bound or equally short of it, both at least `horizon` from the
upper bound or equally near it) read every token alike. A DFA state's members are NFA states;
those inside a counter's copy are described by (copy, state within a count, distance class of
the count) and the others by themselves, and a stack by its frames so described: two sets of
stacks whose closures are described alike have the same mask, computed once.

The state numbering of counter_dfa is what this reads (count * k + state within the count;
after the last count, only its first state), recorded on the DFA as `counter = (k, lo, hi)`.
"""

from __future__ import annotations

import numpy as np

FAR = 1 << 30  # a distance to a bound beyond the horizon
_MAX_KEYS = 1 << 16  # descriptions kept, then the memo starts over


def counter_regions(copies) -> np.ndarray:
    """Rows (first NFA state, states, k, lo, hi or -1) of the NFA's copies (automaton.NFA
    .copies: first state, from, to, DFA) of counter DFAs, sorted by first state."""
    rows = []
    for base, _, _, dfa in copies:
        shape = getattr(dfa, "counter", None)
        if shape is not None:
            k, lo, hi = shape
            rows.append((base, dfa.n_states, k, lo, -1 if hi is None else hi))
    rows.sort()
    return np.array(rows, np.int64).reshape(-1, 5)


class CounterMasks:
    """The masks of one compiled grammar keyed by the description of their stacks (see the
    module's doc); None where no frame of the stacks holds a counter state. Called under the
    grammar's lock."""

    def __init__(self, regions: np.ndarray, horizon: int):
        self.regions = regions
        self.bases = regions[:, 0].copy()
        self.horizon = horizon
        self.frames: dict[int, int | tuple] = {}  # DFA state -> its description
        self.stacks: dict[int, tuple[int, bool]] = {}  # stack -> (number, holds a counter)
        self.stack_ids: dict[tuple, int] = {}
        self.masks: dict[tuple, np.ndarray] = {}
        self.shared = 0  # masks taken from another set of stacks

    def clear(self) -> None:
        self.masks.clear()

    def key(self, grammar, members: tuple[int, ...], complete: bool) -> tuple | None:
        """The description of a set of stacks whose closure is `members`."""
        if len(self.stack_ids) >= _MAX_KEYS:
            self.frames.clear()
            self.stacks.clear()
            self.stack_ids.clear()
            self.masks.clear()
        described = [self._stack(grammar, sid) for sid in members]
        if not any(counted for _, counted in described):
            return None
        return (complete, *sorted(number for number, _ in described))

    def _stack(self, grammar, sid: int) -> tuple[int, bool]:
        hit = self.stacks.get(sid)
        if hit is None:
            g, parent = grammar._frame(sid)
            below, counted = self._stack(grammar, parent) if parent >= 0 else (-1, False)
            frame = self._frame(grammar.machine.dfa, g)
            counted = counted or isinstance(frame, tuple)
            number = self.stack_ids.setdefault((frame, below), len(self.stack_ids))
            hit = self.stacks[sid] = (number, counted)
        return hit

    def _frame(self, dfa, g: int) -> int | tuple:
        hit = self.frames.get(g)
        if hit is None:
            members = dfa.mem[dfa.m_ptr[g] : dfa.m_ptr[g + 1]]
            region = np.searchsorted(self.bases, members, "right") - 1
            rows = self.regions[np.maximum(region, 0)]
            inside = (region >= 0) & (members < rows[:, 0] + rows[:, 1])
            if not inside.any():
                hit = g
            else:
                rows, local = rows[inside], members[inside] - rows[inside, 0]
                k, lo, hi = rows[:, 2], rows[:, 3], rows[:, 4]
                count, state = local // k, local % k
                h = self.horizon
                low = np.where(count >= lo, 0, np.where(lo - count <= h, count - lo, -FAR))
                high = np.where((hi >= 0) & (hi - count <= h), hi - count, FAR)
                counted = zip(region[inside].tolist(), state.tolist(), low.tolist(), high.tolist())
                hit = (tuple(members[~inside].tolist()), tuple(sorted(counted)))
            self.frames[g] = hit
        return hit
