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

A bounded repetition (automaton.NFA.reps: maxItems over items, `{m,n}` in a pattern) is the
same kind of counter: its optional copies are blocks of one layout, one after the other, and
a token of `horizon` bytes reads at most horizon // (the fewest bytes a copy reads) of them,
so copies that many or more from the last are alike (the items of an array are a rule pushed
from each copy: the stacks of items far from maxItems then read every token alike).
"""

from __future__ import annotations

import numpy as np

from grammars import fastcall
from grammars.lazydfa import njit

FAR = 1 << 30  # a distance to a bound beyond the horizon
_NO_REGIONS = np.zeros((0, 7), np.int64)
_MAX_KEYS = 1 << 16  # descriptions kept, then the memo starts over


def counter_regions(copies, reps=(), rules=None) -> np.ndarray:
    """Rows (first NFA state, states, states per count, lo, hi, least bytes per count, the
    row of the region around it or -1), sorted by first state, of the NFA's copies
    (automaton.NFA.copies: first state, from, to, DFA) of counter DFAs, and of its bounded
    repetitions (NFA.reps: first state, states per copy, copies, the repeated node, required),
    whose copies count from 0 to their number less one, with that as their lower bound (the
    required copies) or upper bound (the optional ones); a repetition of a node that may read
    nothing is left out."""
    rows = []
    for base, _, _, dfa in copies:
        if "counter" in dfa.__dict__:  # (a LazyDFA is never a counter)
            k, lo, hi = dfa.counter
            rows.append((base, dfa.n_states, k, lo, -1 if hi is None else hi, 1))
    if reps:
        lengths = _MinLengths(rules or {})
        for base, stride, n, child, required in reps:
            least = lengths.of(child)
            if least > 0:
                # copy c's states count c, and at its end c + 1 copies are read: a token from
                # there reads past the last copy (to what follows the required ones, or into
                # one copy too many) with h whole copies more when n - c <= h + 1, so the
                # bound (the lower for required copies, else the upper) is n - 1
                bounds = (n - 1, -1) if required else (0, n - 1)
                rows.append((base, stride * n, stride, *bounds, least))
    if not rows:
        return _NO_REGIONS
    rows.sort(key=lambda row: (row[0], -row[1]))  # a region before those inside it
    out, open_rows = [], []
    for row in rows:
        while open_rows and out[open_rows[-1]][0] + out[open_rows[-1]][1] <= row[0]:
            open_rows.pop()
        out.append((*row, open_rows[-1] if open_rows else -1))
        open_rows.append(len(out) - 1)
    return np.array(out, np.int64).reshape(-1, 7)


class _MinLengths:
    """The fewest bytes an expression can read (a lower bound: rule references inside
    themselves, LazyDFAs and the inside of objects count 0, as does what lies past a budget
    of nodes)."""

    _BUDGET = 5000

    def __init__(self, rules: dict):
        self.rules = rules
        self.memo: dict[str, int] = {}
        self.left = self._BUDGET

    def of(self, node) -> int:
        self.left -= 1
        if self.left < 0:
            return 0
        kind = node[0]
        if kind == "b":
            return 1
        if kind == "cat":
            return sum(self.of(c) for c in node[1])
        if kind == "alt":
            return min((self.of(c) for c in node[1]), default=0)
        if kind == "rep":
            return node[2] * self.of(node[1]) if node[2] else 0
        if kind == "frag":
            return self.of(node[1])
        if kind == "dfa":
            shape = getattr(node[1], "counter", None)
            return shape[1] if shape is not None else 0
        if kind == "nt":
            name = node[1]
            if name not in self.memo:
                self.memo[name] = 0  # inside itself
                body = self.rules.get(name)
                self.memo[name] = self.of(body) if body is not None else 0
            return self.memo[name]
        return 0  # members: at least nothing


class CounterMasks:
    """The masks of one compiled grammar keyed by the description of their stacks (see the
    module's doc); None where no frame of the stacks holds a counter state. Called under the
    grammar's lock."""

    def __init__(self, regions: np.ndarray, horizon: int):
        self.regions = regions
        self.bases = regions[:, 0].copy()
        self.horizon = horizon
        self.frames: dict[int, int | tuple] = {}  # DFA state -> its description
        # stack -> its description: the stack itself (>= 0) where no frame of it holds a
        # counter state, else -1 - the number of its (frame, description below)
        self.stacks: dict[int, int] = {}
        self.stack_ids: dict[tuple, int] = {}
        self.masks: dict[tuple, np.ndarray] = {}
        self.shared = 0  # masks taken from another set of stacks
        self.out = np.empty((64, 5), np.int64)  # _classified's rows (more members: not shared)

    def clear(self) -> None:
        self.masks.clear()

    def key(self, grammar, members: tuple[int, ...], complete: bool) -> tuple | None:
        """The description of a set of stacks whose closure is `members`."""
        if len(self.stack_ids) >= _MAX_KEYS:
            self.frames.clear()
            self.stacks.clear()
            self.stack_ids.clear()
            self.masks.clear()
        stacks = self.stacks
        described = [stacks.get(sid) for sid in members]
        if None in described:
            described = [self._stack(grammar, sid) for sid in members]
        if min(described) >= 0:  # the set's own stacks: nothing to share
            return None
        return (complete, *sorted(described))

    def _stack(self, grammar, sid: int) -> int:
        hit = self.stacks.get(sid)
        if hit is None:
            g, parent = grammar._frame(sid)
            below = self._stack(grammar, parent) if parent >= 0 else None
            frame = self.frame_key(grammar.machine.dfa, g)
            if (below is None or below >= 0) and not isinstance(frame, tuple):
                hit = sid
            else:
                hit = -1 - self.stack_ids.setdefault((frame, below), len(self.stack_ids))
            self.stacks[sid] = hit
        return hit

    def frame_key(self, dfa, g: int) -> int | tuple:
        """DFA state g, or its description where it holds counter states: two states
        described alike read every token alike, so a walk of the vocabulary from one is a walk
        from the other."""
        hit = self.frames.get(g)
        if hit is None:
            out = self.out
            n = fastcall.call(
                _classified, dfa.mem, dfa.m_ptr, g, self.regions, self.bases, self.horizon, out
            )
            if n <= 0:  # no counter state (or too many to describe: not shared)
                hit = g
            else:
                rows = out[:n].tolist()
                inside = {row[0] for row in rows}
                members = dfa.mem[dfa.m_ptr[g] : dfa.m_ptr[g + 1]].tolist()
                plain = tuple(x for i, x in enumerate(members) if i not in inside)
                hit = (plain, tuple(sorted(tuple(row[1:]) for row in rows)))
            self.frames[g] = hit
        return hit


@njit(cache=True, nogil=True)
def _classified(mem, m_ptr, g, regions, bases, horizon, out):
    """The members of DFA state g inside a counter's copy (regions: counter_regions, whose
    first column is `bases`) as rows of out: (index among g's members, region, state within a
    count, distance class to the lower bound, to the upper one); returns their number, or -1
    when out is too small."""
    n = 0
    for i in range(m_ptr[g], m_ptr[g + 1]):
        x = mem[i]
        r = np.searchsorted(bases, x, "right") - 1
        while r >= 0 and x >= regions[r, 0] + regions[r, 1]:  # past it: the region around
            r = regions[r, 6]
        if r < 0:
            continue
        local = x - regions[r, 0]
        k, lo, hi = regions[r, 2], regions[r, 3], regions[r, 4]
        h = horizon // regions[r, 5]  # the counts a token of `horizon` bytes can read
        count = local // k
        low = 0 if count >= lo else (count - lo if lo - count <= h else -FAR)
        high = hi - count if hi >= 0 and hi - count <= h else FAR
        if n == out.shape[0]:
            return -1
        out[n, 0] = i - m_ptr[g]
        out[n, 1] = r
        out[n, 2] = local % k
        out[n, 3] = low
        out[n, 4] = high
        n += 1
    return n
