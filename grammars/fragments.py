"""Sub-automata built once per NFA and copied: an expression the schema builder reuses (a
definition inlined at every `$ref`, the value of an unconstrained property, a separator) is
wrapped as ("frag", node); the first time the NFA meets the wrapper it builds the node and
remembers what that added, and every later time it only reserves as many states and records a
use, which grammars.nfa_layout lays out in compiled code.

A fragment built between states s and e only adds moves among s, e and the states it reserved
(first .. first + size - 1), so a use between s2 and e2 on states from base is the same moves
with s -> s2, e -> e2 and first + i -> base + i.
"""

from __future__ import annotations


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
