"""A large set of literals as one minimal acyclic DFA, built in time linear in their length.

An alternation of 50,000 literals as a Thompson NFA makes every later step of compilation pay
for all of them at once; instead the words are sorted and added one by one to a minimal
automaton (Daciuk et al.'s construction for sorted input): when a word is added, the states the
previous word does not share with it can no longer change, so each is replaced by an equal
registered state (same finality, same edges) or registered itself.

A word is a tuple of labels: a label below 256 is that byte; a larger one names a symbol with
several spellings, each a tuple of byte masks (`spell(label)`: a character that a JSON string
may write raw or escaped). The spellings of one state's symbols are merged into a small trie of
masks, so the DFA is deterministic at the byte level; masks met at one place must be equal or
disjoint (JSON string spellings are), else OverlappingSpellings and the caller keeps an
alternation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from grammars.automaton import EagerDFA
from grammars.budget import checkpoint

Spell = Callable[[int], list[tuple[int, ...]]]


class OverlappingSpellings(Exception):
    """Two spellings met at one state with masks that overlap without being equal."""


def minimal_dfa(words: Iterable[tuple[int, ...]], spell: Spell | None = None) -> EagerDFA:
    """The DFA accepting exactly `words` (labels above 255 spelled by `spell`)."""
    words = sorted(set(words))
    checkpoint()
    children, final = _minimal_automaton(words)
    return _byte_dfa(children, final, spell)


def node_words(node, limit: int = 16) -> list[tuple[int, ...]] | None:
    """The language of an expression without loops or rule references ("b", "cat" and "alt"
    nodes) as tuples of byte masks; None for other nodes or past `limit` tuples."""
    kind = node[0]
    if kind == "b":
        return [(node[1],)] if node[1] else []
    if kind not in ("cat", "alt"):
        return None
    out: list[tuple[int, ...]] = [()] if kind == "cat" else []
    for child in node[1]:
        sub = node_words(child, limit)
        if sub is None:
            return None
        out = [a + b for a in out for b in sub] if kind == "cat" else out + sub
        if len(out) > limit:
            return None
    return out


def _minimal_automaton(words: list[tuple[int, ...]]) -> tuple[list[list], list[bool]]:
    """(edges, final) of the minimal automaton over labels: edges[s] = [(label, target)] in
    label order, state 0 the start. `words` sorted, without duplicates."""
    children: list[list[tuple[int, int]]] = [[]]
    final = [False]
    register: dict[tuple, int] = {}
    path = [0]  # path[i]: the state after the first i labels of the previous word
    prev: tuple[int, ...] = ()
    for n, word in enumerate(words):
        if not n & 1023:
            checkpoint()
        shared, limit = 0, min(len(prev), len(word))
        while shared < limit and prev[shared] == word[shared]:
            shared += 1
        _freeze(path, shared + 1, children, final, register)
        for label in word[shared:]:
            state = len(final)
            children.append([])
            final.append(False)
            children[path[-1]].append((label, state))
            path.append(state)
        final[path[-1]] = True
        prev = word
    _freeze(path, 1, children, final, register)
    return children, final


def _freeze(path: list[int], keep: int, children, final, register) -> None:
    """Register the states of `path` past its first `keep`, deepest first; each one equal to a
    registered state is replaced by it in its parent's last edge."""
    while len(path) > keep:
        state = path.pop()
        twin = register.setdefault((final[state], tuple(children[state])), state)
        if twin != state:
            edges = children[path[-1]]
            edges[-1] = (edges[-1][0], twin)


def _byte_dfa(children: list[list], final: list[bool], spell: Spell | None) -> EagerDFA:
    """The automaton over labels as an EagerDFA over bytes: each label's spellings become a
    trie of masks from the label's source state to its target."""
    edges: list[dict[int, int]] = []  # per DFA state: mask -> target
    used: list[int] = []  # per DFA state: the union of its masks
    inner: list[bool] = []  # a state inside a spelling (not a state of the label automaton)
    accept: list[bool] = []

    def new_state(accepting: bool, is_inner: bool) -> int:
        edges.append({})
        used.append(0)
        inner.append(is_inner)
        accept.append(accepting)
        return len(accept) - 1

    def step(src: int, mask: int, target: int | None) -> int:
        """Follow or add the edge src --mask--> (target, or a new inner state when None)."""
        hit = edges[src].get(mask)
        if hit is None:
            if used[src] & mask:
                raise OverlappingSpellings()
            hit = edges[src][mask] = new_state(False, True) if target is None else target
            used[src] |= mask
        elif hit != target and (target is not None or not inner[hit]):
            raise OverlappingSpellings()
        return hit

    index = {0: new_state(final[0], False)}
    order = [0]
    dead_label = False
    for n, s in enumerate(order):  # grows while iterating: breadth first
        if not n & 1023:
            checkpoint()
        src = index[s]
        for label, t in children[s]:
            target = index.get(t)
            if target is None:
                target = index[t] = new_state(final[t], False)
                order.append(t)
            if label < 256:
                step(src, 1 << label, target)
                continue
            spellings = spell(label) if spell is not None else []
            dead_label = dead_label or not spellings
            for spelling in spellings:
                node = src
                for mask in spelling[:-1]:
                    node = step(node, mask, None)
                step(node, spelling[-1], target)
    trans = []
    for n, e in enumerate(edges):
        if not n & 4095:
            checkpoint()
        trans.append(list(e.items()))
    dfa = EagerDFA(trans, accept, 0)
    return dfa.trimmed() if dead_label else dfa
