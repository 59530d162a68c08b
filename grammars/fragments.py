"""Sub-automata built once per NFA and copied: an expression the schema builder reuses (a
definition inlined at every `$ref`, the value of an unconstrained property, a separator) is
wrapped as ("frag", node); the first time the NFA meets the wrapper it builds the node and
remembers what that added, and every later time it only reserves as many states and records a
use, which grammars.nfa_layout lays out in compiled code.

A fragment built between states s and e only adds moves among s, e and the states it reserved
(first .. first + size - 1), so a use between s2 and e2 on states from base is the same moves
with s -> s2, e -> e2 and first + i -> base + i.

A wrapper that lives across compiles (the any-value node of each set of options, held by a
module cache) can be kept (`keep`): its first build in any NFA is recorded once, with the
fragments inside it built afresh, and later NFAs replay the recording (a few array operations)
instead of building the node again.
"""

from __future__ import annotations

import numpy as np


class Fragment:
    """What the first build of a fragment added: its states and, for each list of the NFA
    (eps, edges, nts, copies, uses), the slice of moves (entries for copies and uses) that
    build appended."""

    __slots__ = ("first", "size", "s", "e", "eps", "edges", "nts", "copies", "uses")

    def __init__(self, before: tuple, after: tuple, s: int, e: int):
        self.first, self.size = before[0], after[0] - before[0]
        self.s, self.e = s, e
        self.eps, self.edges, self.nts, self.copies, self.uses = (
            slice(a, b) for a, b in zip(before[1:], after[1:])
        )

    def mapper(self, base: int, s: int, e: int):
        """The state of a use (from base, between s and e) for each state of the first build."""
        fs, fe, shift = self.s, self.e, base - self.first
        return lambda x: s if x == fs else e if x == fe else x + shift


def _marks(nfa) -> tuple:
    return (
        nfa.size,
        len(nfa.eps) // 2,
        len(nfa.edges) // 3,
        len(nfa.nts) // 3,
        len(nfa.copies),
        len(nfa.frag_uses),
    )


def build_fragment(nfa, wrapper: tuple, s: int, e: int) -> None:
    """Build ("frag", node) between s and e: the node itself the first time, a use after."""
    hit = nfa.fragments.get(id(wrapper))
    if hit is None and s != e:
        kept = _KEPT.get(id(wrapper))
        if kept is not None and kept[0] is wrapper:
            if kept[1] is None:
                kept[1] = _recorded(nfa, wrapper, s, e)
            else:
                kept[1].replay(nfa, wrapper, s, e)
            return
    if hit is None or s == e:
        before = _marks(nfa)
        nfa.build(wrapper[1], s, e)
        if hit is None and s != e:  # (between one state and itself, uses could not map it)
            nfa.fragments[id(wrapper)] = (wrapper, Fragment(before, _marks(nfa), s, e))
        return
    frag = hit[1]
    base = nfa.reserve(frag.size)
    nfa.frag_uses.append((frag, base, s, e))
    m = frag.mapper(base, s, e)
    # the DFA copies and fragment uses inside the first build, here too
    for b, cs, ce, dfa in nfa.copies[frag.copies]:
        nfa.copies.append((m(b), m(cs), m(ce), dfa))
    for inner, b, us, ue in nfa.frag_uses[frag.uses]:
        nfa.frag_uses.append((inner, m(b), m(us), m(ue)))


def expand_uses(nfa) -> None:
    """The moves of every fragment use as tuples in the NFA's lists (for its per-state views)."""
    eps, edges, nts = nfa.eps, nfa.edges, nfa.nts
    for frag, base, s, e in nfa.frag_uses:
        m = frag.mapper(base, s, e)
        for i in range(frag.eps.start, frag.eps.stop):
            eps += (m(eps[2 * i]), m(eps[2 * i + 1]))
        for i in range(frag.edges.start, frag.edges.stop):
            edges += (m(edges[3 * i]), edges[3 * i + 1], m(edges[3 * i + 2]))
        for i in range(frag.nts.start, frag.nts.stop):
            nts += (m(nts[3 * i]), nts[3 * i + 1], m(nts[3 * i + 2]))
    nfa.frag_uses = []


_MAX_KEPT = 64
_KEPT: dict[int, list] = {}  # id(wrapper) -> [wrapper, its Recording once built]


def keep(wrapper: tuple) -> tuple:
    """`wrapper`, marked as one that lives across compiles (see the module's docstring); a
    node that is no fragment is returned as it is."""
    if wrapper[0] == "frag" and id(wrapper) not in _KEPT:
        if len(_KEPT) >= _MAX_KEPT:
            _KEPT.clear()
        _KEPT[id(wrapper)] = [wrapper, None]
    return wrapper


def forget_kept() -> None:
    """Drop every kept wrapper and its recording (a process that starts afresh, as a
    benchmark pass does)."""
    _KEPT.clear()


def _recorded(nfa, wrapper: tuple, s: int, e: int) -> Recording:
    """Build `wrapper` between s and e as its first build in `nfa`, the fragments inside it
    built there too (not uses of builds outside), and record what that added."""
    outside, nfa.fragments = nfa.fragments, {}
    before, reps = _marks(nfa), len(nfa.reps)
    try:
        nfa.build(wrapper[1], s, e)
    finally:
        inner, nfa.fragments = nfa.fragments, outside
    frag = Fragment(before, _marks(nfa), s, e)
    for key, value in inner.items():
        outside.setdefault(key, value)
    outside[id(wrapper)] = (wrapper, frag)
    return Recording(nfa, frag, list(inner.values()), nfa.reps[reps:])


class Recording:
    """A kept fragment's first build, `frag`, with what it added copied out of the NFA that
    made it: replayed onto another NFA by frag.mapper, as a use would be, but into the NFA's
    own lists (the positions of the fragments inside kept as offsets from where it began)."""

    def __init__(self, nfa, frag: Fragment, inner: list, reps: list):
        self.frag = frag
        eps = nfa.eps[2 * frag.eps.start : 2 * frag.eps.stop]
        edges = nfa.edges[3 * frag.edges.start : 3 * frag.edges.stop]
        nts = nfa.nts[3 * frag.nts.start : 3 * frag.nts.stop]
        self.n_eps, self.n_edges = len(eps), len(edges) // 3
        # the states of every move: eps, then the edges' and the references' (from, to), as
        # offsets from the first state (frag.mapper's shift, for the whole array at once)
        states = np.array(eps + edges[0::3] + edges[2::3] + nts[0::3] + nts[2::3], np.int64)
        self.at_s = np.flatnonzero(states == frag.s)
        self.at_e = np.flatnonzero(states == frag.e)
        self.offsets = states - frag.first
        self.masks, self.rules = edges[1::3], nts[1::3]
        self.copies = nfa.copies[frag.copies]
        # the fragments first built inside (all that its uses copy: `_recorded` hid the others),
        # with their wrappers where the NFA knows them by one (None: a replay's, not kept by id)
        inner = {id(f): (w, f) for w, f in inner}
        for f, *_ in nfa.frag_uses[frag.uses]:
            inner.setdefault(id(f), (None, f))
        number = {key: i for i, key in enumerate(inner)}
        self.uses = [(number[id(f)], *use) for f, *use in nfa.frag_uses[frag.uses]]
        begun = [part.start for part in _parts(frag)]
        self.inner = [
            (w, f, [(p.start - k, p.stop - k) for p, k in zip(_parts(f), begun)])
            for w, f in inner.values()
        ]
        self.reps = reps

    def replay(self, nfa, wrapper: tuple, s: int, e: int) -> None:
        """Add the recorded build between s and e, as `wrapper`'s first build in `nfa`."""
        before = _marks(nfa)
        base = nfa.reserve(self.frag.size)
        m = self.frag.mapper(base, s, e)
        values = self.offsets + base
        values[self.at_s] = s
        values[self.at_e] = e
        values = values.tolist()
        n_eps, k = self.n_eps, self.n_edges
        nfa.eps += values[:n_eps]
        flat = [0] * (3 * k)
        flat[0::3], flat[1::3], flat[2::3] = (
            values[n_eps : n_eps + k],
            self.masks,
            values[n_eps + k : n_eps + 2 * k],
        )
        nfa.edges += flat
        n = len(self.rules)
        flat = [0] * (3 * n)
        at = n_eps + 2 * k
        flat[0::3], flat[1::3], flat[2::3] = values[at : at + n], self.rules, values[at + n :]
        nfa.nts += flat
        nfa.copies += [(m(b), m(cs), m(ce), dfa) for b, cs, ce, dfa in self.copies]
        made = []
        for w, f, parts in self.inner:
            g = Fragment.__new__(Fragment)
            g.first, g.size, g.s, g.e = m(f.first), f.size, m(f.s), m(f.e)
            g.eps, g.edges, g.nts, g.copies, g.uses = (
                slice(k0 + a, k0 + b) for k0, (a, b) in zip(before[1:], parts)
            )
            made.append(g)
            if w is not None:
                nfa.fragments.setdefault(id(w), (w, g))
        nfa.frag_uses += [(made[i], m(b), m(us), m(ue)) for i, b, us, ue in self.uses]
        nfa.reps += [(m(x), *rest) for x, *rest in self.reps]
        nfa.fragments[id(wrapper)] = (wrapper, Fragment(before, _marks(nfa), s, e))


def _parts(f: Fragment) -> tuple:
    """A fragment's slices of the NFA's lists, in _marks' order."""
    return f.eps, f.edges, f.nts, f.copies, f.uses
