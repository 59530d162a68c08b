"""Anchors (^, $) inside a pattern and lookaheads at its start, where the language stays regular.

ECMA-262 semantics (JSON Schema patterns): without the multiline flag, ^ and $ match only at
the ends of the text. A pattern is converted under a position state (s, e): s = 0 while nothing
has been read, 1 after; e = 1 once a $ has been passed, after which nothing more may be read.
Each item maps the state it starts in to the nodes of what it reads, by the state it leaves
in: ^ reads the empty string at s = 0 only, $ leads to e = 1, a character needs e = 0 and
leads to s = 1. A lookahead met before anything is read, (?=R) or (?!R), constrains the whole
text to start (or not start) with a match of R: an intersection (or difference) of automata.
"""

from __future__ import annotations

from re import _constants as C  # noqa: N812

from grammars.automaton import EMPTY, NOTHING, alt, cat, difference, intersect, rep
from grammars.errors import GrammarError

_MAX_UNROLL = 8  # a repeat of a group holding an anchor is laid out up to this many times
_LOOKAHEADS = (C.ASSERT, C.ASSERT_NOT)


def has_assertions(items) -> bool:
    """Whether sre items hold an anchor or a lookaround anywhere."""
    for op, av in items:
        if op is C.AT or op in _LOOKAHEADS:
            return True
        if op is C.BRANCH and any(has_assertions(b) for b in av[1]):
            return True
        if op is C.SUBPATTERN and has_assertions(av[3]):
            return True
        if op in (C.MAX_REPEAT, C.MIN_REPEAT) and has_assertions(av[2]):
            return True
    return False


def split_empty(node) -> tuple[bool, tuple]:
    """(whether `node` matches the empty string, the node of its non-empty matches)."""
    kind = node[0]
    if kind == "b":
        return False, node
    if kind == "alt":
        parts = [split_empty(c) for c in node[1]]
        return any(h for h, _ in parts), alt(*(n for _, n in parts))
    if kind == "cat":
        # a non-empty match of X1..Xn: X1..Xi-1 empty, Xi non-empty, the rest anything
        nullable, non_empty, rest = True, NOTHING, EMPTY
        for child in reversed(node[1]):
            h, n = split_empty(child)
            non_empty = alt(cat(n, rest), non_empty if h else NOTHING)
            nullable = nullable and h
            rest = cat(child, rest)
        return nullable, non_empty
    if kind == "rep":
        _, child, lo, hi = node
        h, n = split_empty(child)
        if h:  # empty rounds make up the count
            return True, rep(n, 1, hi)
        return lo == 0, rep(child, max(lo, 1), hi)
    raise GrammarError("pattern: an anchor beside this construct is not supported")


def _merge(into: dict, more: dict) -> None:
    for state, node in more.items():
        into[state] = alt(into[state], node) if state in into else node


class AnchoredPattern:
    """Converts sre items with a _Converter (grammars.regex) for the anchor-free parts."""

    def __init__(self, conv, anything: tuple):
        self.conv = conv
        self.anything = anything  # any text
        self.lookaheads: list[tuple[bool, tuple]] = []  # (negative, node of texts R starts)

    def seq(self, items, start: dict, top: bool = False) -> dict:
        """The states after `items` from the states of `start`, each with the node of what was
        read; lookaheads only in the top sequence (elsewhere they would constrain a part)."""
        states = dict(start)
        for op, av in items:
            nxt: dict = {}
            for state, node in states.items():
                if op in _LOOKAHEADS:
                    if not top:
                        raise GrammarError("pattern: lookaheads are only supported at the start")
                    self._lookahead(op, av, state, node)
                    nxt[state] = node
                    continue
                for after, part in self.item(op, av, state).items():
                    _merge(nxt, {after: cat(node, part)})
            states = {k: v for k, v in nxt.items() if v != NOTHING}
        return states

    def item(self, op, av, state) -> dict:
        s, e = state
        if op is C.AT:
            if av is C.AT_BEGINNING:
                return {state: EMPTY} if s == 0 else {}
            if av is C.AT_END:
                return {(s, 1): EMPTY}
            raise GrammarError("pattern: word boundaries (\\b, \\B) are not supported")
        if op is C.BRANCH and has_assertions([(op, av)]):
            out: dict = {}
            for branch in av[1]:
                _merge(out, self.seq(branch, {state: EMPTY}))
            return out
        if op is C.SUBPATTERN and has_assertions(av[3]):
            if av[1] or av[2]:
                raise GrammarError("pattern: flags on a group holding an anchor are not supported")
            return self.seq(av[3], {state: EMPTY})
        if op in (C.MAX_REPEAT, C.MIN_REPEAT) and has_assertions(av[2]):
            lo, hi, sub = av
            if hi is C.MAXREPEAT or hi > _MAX_UNROLL:
                raise GrammarError("pattern: unbounded repeats of an anchor are not supported")
            out, cur = {}, {state: EMPTY}
            for count in range(hi + 1):
                if count >= lo:
                    _merge(out, cur)
                if count < hi:
                    cur = self.seq(sub, cur)
            return out
        node = self.conv.item(op, av)
        if e:  # after $ only empty matches
            return {state: EMPTY} if split_empty(node)[0] else {}
        if s:
            return {state: node}
        nullable, non_empty = split_empty(node)
        out = {(1, 0): non_empty} if non_empty != NOTHING else {}
        if nullable:
            out[state] = EMPTY
        return out

    def _lookahead(self, op, av, state, node) -> None:
        if state[0] != 0 or node != EMPTY:
            raise GrammarError("pattern: lookaheads are only supported at the start")
        direction, sub = av
        if direction != 1:  # lookbehind
            raise GrammarError("pattern: lookbehinds are not supported")
        inner = AnchoredPattern(self.conv, self.anything)
        self.lookaheads.append((op is C.ASSERT_NOT, inner.text(sub, search_end=True)))
        self.lookaheads.extend(inner.lookaheads)

    def text(self, items, search_start: bool = False, search_end: bool = False) -> tuple:
        """The texts `items` match: anywhere in them with search_start / search_end, else
        from the start / to the end; before the lookaheads are applied."""
        anything = self.anything
        start = {(0, 0): EMPTY}
        if search_start:
            start[(1, 0)] = split_empty(anything)[1]
        ends = self.seq(items, start, top=True)
        return alt(
            *(
                cat(node, anything) if search_end and not e else node
                for (_, e), node in ends.items()
            )
        )

    def node(self, items, search: bool) -> tuple:
        out = self.text(items, search, search)
        for negative, ahead in self.lookaheads:
            out = difference(out, ahead) if negative else intersect(out, ahead)
        return out
