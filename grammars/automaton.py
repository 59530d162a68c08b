"""Byte-level automata: an expression tree over bytes and rule references, a Thompson NFA built
from it, and small eager DFAs for the operations an NFA cannot do (intersection, difference).

Expression nodes are tuples:
    ("b", mask)            one byte from a set (bit b of the int `mask` set = byte b allowed)
    ("cat", (n, ...))      concatenation; ("cat", ()) is the empty string
    ("alt", (n, ...))      alternation;   ("alt", ()) is the empty language
    ("rep", n, lo, hi)     n repeated lo..hi times (hi None = unbounded)
    ("members", items, sep, extra, (lo, hi), any_order, needs)  separated (node, required)
                           items in order (any_order True: in any order, each once; REPEATING:
                           in any order, each any number of times), then extras; lo..hi
                           members in all (hi None = unbounded; REPEATING: always (0, None));
                           needs: None, or (in order) sets of item indices one of which must
                           all be present
    ("nt", name)           a reference to another rule (matched by pushing a stack frame)
    ("dfa", EagerDFA)      an already determinised automaton, embedded as is
    ("frag", n)            n, built once per NFA and copied at its other uses (grammars.fragments)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.fragments import build_fragment, expand_uses
from grammars.members import build_members

ALL_BYTES = (1 << 256) - 1
EMPTY = ("cat", ())
NOTHING = ("alt", ())
MAX_NFA_STATES = 400_000
_MIN_REP_COPIES = 8  # bounded repetitions whose copies counter_masks may describe alike
_HASHED_ALT = 64  # alternations longer than this drop duplicates by hashing, not by comparing
_BYTE_NODES = tuple(("b", 1 << x) for x in range(256))  # one node per byte, shared


def byte_set(*ranges: tuple[int, int] | int) -> int:
    mask = 0
    for r in ranges:
        lo, hi = (r, r) if isinstance(r, int) else r
        mask |= ((1 << (hi - lo + 1)) - 1) << lo
    return mask


def lit(data: bytes | str) -> tuple:
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) < 2:
        return _BYTE_NODES[data[0]] if data else EMPTY
    return ("cat", itemgetter(*data)(_BYTE_NODES))  # a tuple of the nodes (two or more)


def cat(*nodes) -> tuple:
    flat = []
    for n in nodes:
        if n[0] == "cat":
            flat.extend(n[1])
        elif n == NOTHING:
            return NOTHING
        else:
            flat.append(n)
    return flat[0] if len(flat) == 1 else ("cat", tuple(flat))


def alt(*nodes) -> tuple:
    flat = []
    if len(nodes) > _HASHED_ALT:
        for n in nodes:
            if n[0] == "alt":
                flat.extend(n[1])
            else:
                flat.append(n)
        flat = list(dict.fromkeys(flat))
    else:
        for n in nodes:
            if n[0] == "alt":
                flat.extend(n[1])
            elif n not in flat:
                flat.append(n)
    # merge single-byte alternatives into one set
    masks = [n[1] for n in flat if n[0] == "b"]
    if len(masks) > 1:
        merged = 0
        for m in masks:
            merged |= m
        flat = [n for n in flat if n[0] != "b"] + [("b", merged)]
    return flat[0] if len(flat) == 1 else ("alt", tuple(flat))


def rep(node, lo: int = 0, hi: int | None = None) -> tuple:
    if hi is not None and hi < lo:
        return NOTHING
    if hi == 0:
        return EMPTY
    if lo == 1 and hi == 1:
        return node
    return ("rep", node, lo, hi)


def opt(node) -> tuple:
    return rep(node, 0, 1)


def mask_bytes(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


class NFA:
    """Thompson NFA over bytes, with rule-reference edges. One NFA holds every rule of a grammar.
    Its moves are flat lists (source, ..., target, source, ...), cheap to add to and to turn
    into arrays (lazydfa_arrays.nfa_graph); the moves of each state are listed on first need."""

    def __init__(self):
        self.size = 0
        # moves flat, each a run of ints (quick to append and to turn into arrays)
        self.eps: list[int] = []  # state, state
        self.edges: list[int] = []  # state, byte mask, state
        self.nts: list = []  # state, rule name, state to return to
        # embedded DFAs kept whole, (first state, from, to, dfa): turned into arrays at once
        self.copies: list[tuple[int, int, int, EagerDFA]] = []
        # bounded repetitions laid out as equal blocks, one per copy: (first state, states per
        # copy, copies, the repeated node, whether the copies are the required ones (each block
        # ends at the end state of its copy) or the optional ones), for grammars.counter_masks
        self.reps: list[tuple[int, int, int, tuple, bool]] = []
        # ("frag", node) wrappers built so far, by id, and their later uses (grammars.fragments)
        self.fragments: dict[int, tuple] = {}
        self.frag_uses: list[tuple] = []
        # valid once the NFA stops changing
        self._closures: dict[int, frozenset[int]] = {}
        self._eps_of: list[list[int]] | None = None
        self._edges_of: list[list[tuple[int, int]]] | None = None

    def new(self) -> int:
        n = self.size
        if not n & 1023:
            if n >= MAX_NFA_STATES:
                raise GrammarError("grammar too large (automaton size limit reached)")
            checkpoint()
        self.size = n + 1
        return n

    def reserve(self, k: int) -> int:
        """k new states, numbered from the one returned."""
        n = self.size
        m = n + k
        if n >> 10 != m >> 10:  # passing a multiple of 1024 states, as new() checks
            if m > MAX_NFA_STATES:
                raise GrammarError("grammar too large (automaton size limit reached)")
            checkpoint()
        self.size = m
        return n

    def add_copy(self, dfa: EagerDFA, s: int, e: int) -> None:
        """`dfa` between states s and e, on states of its own (see EagerDFA.embed)."""
        n = self.size
        k = dfa.n_states
        if n + k > MAX_NFA_STATES:
            raise GrammarError("grammar too large (automaton size limit reached)")
        if n >> 10 != (n + k) >> 10:
            checkpoint()
        self.size = n + k
        self.copies.append((n, s, e, dfa))

    def _expand_copies(self) -> None:
        """The copies' (and fragment uses') moves as tuples, for the per-state views below."""
        expand_uses(self)
        for base, s, e, dfa in self.copies:
            eps, edges = self.eps, self.edges
            eps += (s, base + dfa.start)
            for i, tr in enumerate(dfa.trans):
                for cm, t in tr:
                    edges += (base + i, cm, base + t)
                if dfa.accept[i]:
                    eps += (base + i, e)
        self.copies = []

    def edges_of(self, s: int) -> list[tuple[int, int]]:
        """State s's byte moves (mask, target)."""
        if self._edges_of is None:
            self._expand_copies()
            lists: list[list[tuple[int, int]]] = [[] for _ in range(self.size)]
            for a, mask, b in zip(self.edges[::3], self.edges[1::3], self.edges[2::3]):
                lists[a].append((mask, b))
            self._edges_of = lists
        return self._edges_of[s]

    def build(self, node, s: int, e: int) -> None:
        kind = node[0]
        if kind == "b":
            if node[1]:
                self.edges += (s, node[1], e)
        elif kind == "cat":
            children = node[1]
            last = len(children) - 1
            if last < 0:
                self.eps += (s, e)
                return
            first = self.reserve(last) - 1  # state i of the chain is first + i, 0 < i <= last
            edges = self.edges
            cur = s
            for i, child in enumerate(children):
                nxt = e if i == last else first + i + 1
                kind = child[0]
                if kind == "b":  # the common case (literals), without a call
                    if child[1]:
                        edges += (cur, child[1], nxt)
                elif kind == "rep" and child[3] is None and not child[2] and child[1][0] == "b":
                    loop = self.reserve(1)  # any number of one byte class (whitespace)
                    if child[1][1]:
                        edges += (loop, child[1][1], loop)
                    self.eps += (cur, loop, loop, nxt)
                else:
                    self.build(child, cur, nxt)
                cur = nxt
        elif kind == "alt":
            for child in node[1]:
                self.build(child, s, e)
        elif kind == "rep":
            _, child, lo, hi = node
            cur = s
            if lo >= _MIN_REP_COPIES:  # copies laid out as blocks, each from its end state
                first, stride, alike = self.size, 0, True
                for _ in range(lo):
                    nxt = self.reserve(1)
                    self.build(child, cur, nxt)
                    stride = stride or self.size - nxt
                    alike = alike and self.size - nxt == stride
                    cur = nxt
                if alike:
                    self.reps.append((first, stride, lo, child, True))
            elif lo:
                first = self.reserve(lo)
                for i in range(first, first + lo):
                    self.build(child, cur, i)
                    cur = i
            eps = self.eps
            if hi is None:
                a = self.reserve(2)
                if child[0] == "b":  # the common case (whitespace), without a call
                    if child[1]:
                        self.edges += (a, child[1], a + 1)
                else:
                    self.build(child, a, a + 1)
                eps += (cur, a, a + 1, a, a + 1, e, cur, e)
            else:
                first, stride, alike = self.size, 0, True
                for _ in range(hi - lo):
                    nxt = self.reserve(2)
                    eps += (cur, nxt + 1)
                    self.build(child, nxt + 1, nxt)
                    eps += (cur, e)
                    stride = stride or self.size - nxt
                    alike = alike and self.size - nxt == stride
                    cur = nxt
                eps += (cur, e)
                if hi - lo >= _MIN_REP_COPIES and alike:  # copies of one layout
                    self.reps.append((first, stride, hi - lo, child, False))
        elif kind == "members":
            build_members(self, node, s, e)
        elif kind == "nt":
            self.nts += (s, node[1], e)
        elif kind == "dfa":
            node[1].embed(self, s, e)
        elif kind == "frag":
            build_fragment(self, node, s, e)
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown node {kind}")

    def closure(self, states) -> frozenset[int]:
        """States reachable through empty moves (per-state closures are memoised)."""
        states = list(states)
        if len(states) == 1:
            return self._single_closure(states[0])
        out: set[int] = set()
        for s in states:
            out |= self._single_closure(s)
        return frozenset(out)

    def _single_closure(self, s: int) -> frozenset[int]:
        memo = self._closures
        hit = memo.get(s)
        if hit is None:
            if self._eps_of is None:
                self._expand_copies()
                lists: list[list[int]] = [[] for _ in range(self.size)]
                for a, b in zip(self.eps[::2], self.eps[1::2]):
                    lists[a].append(b)
                self._eps_of = lists
            seen = {s}
            todo = [s]
            eps = self._eps_of
            while todo:
                for t in eps[todo.pop()]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            hit = memo[s] = frozenset(seen)
        return hit


def byte_classes(edges) -> list[tuple[int, list[int]]]:
    """Split the 256 bytes into classes with the same set of targets: [(byte mask, targets)]."""
    by_mask: dict[int, list[int]] = {}  # edges on one mask split the classes once
    for mask, target in edges:
        by_mask.setdefault(mask, []).append(target)
    classes: list[tuple[int, list[int]]] = [(ALL_BYTES, [])]
    for i, (mask, targets) in enumerate(by_mask.items()):
        if i & 255 == 255:
            checkpoint()
        nxt = []
        for cm, ts in classes:
            inter = cm & mask
            if not inter:
                nxt.append((cm, ts))
            elif inter == cm:
                nxt.append((cm, ts + targets))
            else:
                nxt.append((inter, ts + targets))
                nxt.append((cm & ~mask, ts))
        classes = nxt
    return [(cm, ts) for cm, ts in classes if ts]


class StateIndex:
    """Numbers the states of an EagerDFA under construction by key, in order of discovery;
    keys met for the first time are queued in `todo`."""

    def __init__(self, dfa: EagerDFA, limit: int, too_large: str):
        self.dfa, self.limit, self.too_large = dfa, limit, too_large
        self.index: dict = {}
        self.todo: list = []

    def __call__(self, key, accepting: bool) -> int:
        i = self.index.get(key)
        if i is None:
            if len(self.index) >= self.limit:
                raise GrammarError(self.too_large)
            i = self.index[key] = len(self.dfa.trans)
            self.dfa.trans.append([])
            self.dfa.accept.append(accepting)
            self.todo.append(key)
        return i


@dataclass(eq=False)  # compared and hashed by identity, so nodes that embed one are hashable
class EagerDFA:
    """A complete DFA without rule references: trans[s] = list of (byte mask, target)."""

    trans: list[list[tuple[int, int]]] = field(default_factory=list)
    accept: list[bool] = field(default_factory=list)
    start: int = 0

    @classmethod
    def from_node(cls, node, limit: int = 20_000) -> EagerDFA:
        nfa = NFA()
        s, e = nfa.new(), nfa.new()
        nfa.build(node, s, e)
        if nfa.nts:
            raise GrammarError("rule references cannot be combined with intersections")
        dfa = cls()
        states = StateIndex(dfa, limit, "constraint too large to determinise")
        start = nfa.closure([s])
        dfa.start = states(start, e in start)
        while states.todo:
            checkpoint()
            S = states.todo.pop()
            i = states.index[S]
            edges = [edge for n in S for edge in nfa.edges_of(n)]
            for cm, ts in byte_classes(edges):
                T = nfa.closure(ts)
                dfa.trans[i].append((cm, states(T, e in T)))
        return dfa.trimmed()

    def trimmed(self) -> EagerDFA:
        """Drop states that cannot reach acceptance (the result may be the empty language)."""
        trans = self.trans  # (made on each use for some DFAs: taken once per operation)
        n = len(trans)
        rev: list[list[int]] = [[] for _ in range(n)]
        for s, tr in enumerate(trans):
            if not s & 4095:
                checkpoint()
            for _, t in tr:
                rev[t].append(s)
        live = {s for s in range(n) if self.accept[s]}
        todo = list(live)
        popped = 0
        while todo:
            popped += 1
            if not popped & 4095:
                checkpoint()
            for p in rev[todo.pop()]:
                if p not in live:
                    live.add(p)
                    todo.append(p)
        if self.start not in live:
            return EagerDFA([[]], [False], 0)
        order = sorted(live)
        remap = {s: i for i, s in enumerate(order)}
        trans = [[(cm, remap[t]) for cm, t in trans[s] if t in live] for s in order]
        return EagerDFA(trans, [self.accept[s] for s in order], remap[self.start])

    def path_lengths(self) -> tuple[int, int | None]:
        """Shortest and longest accepted lengths in bytes (longest None when unbounded)."""
        from collections import deque

        trans = self.trans
        dist = {self.start: 0}
        queue = deque([self.start])
        shortest = None
        while queue:
            s = queue.popleft()
            if self.accept[s] and shortest is None:
                shortest = dist[s]
            for _, t in trans[s]:
                if t not in dist:
                    dist[t] = dist[s] + 1
                    queue.append(t)
        # longest path: only when acyclic (states are all live after trimming)
        order, state, longest = [], {}, {}

        def visit(s):
            stack = [(s, iter(trans[s]))]
            state[s] = 1
            while stack:
                node, it = stack[-1]
                for _, t in it:
                    if state.get(t) == 1:
                        return False
                    if t not in state:
                        state[t] = 1
                        stack.append((t, iter(trans[t])))
                        break
                else:
                    state[node] = 2
                    order.append(node)
                    stack.pop()
            return True

        if not visit(self.start):
            return shortest or 0, None
        for s in order:  # reverse topological order: successors first
            best = 0 if self.accept[s] else -1
            for _, t in trans[s]:
                if longest.get(t, -1) >= 0:
                    best = max(best, longest[t] + 1)
            longest[s] = best
        return shortest or 0, longest[self.start]

    @property
    def n_states(self) -> int:
        return len(self.trans)

    def is_empty(self) -> bool:
        return not any(self.accept)

    def accepts(self, data: bytes) -> bool:
        s, trans = self.start, self.trans
        for b in data:
            s = next((t for m, t in trans[s] if m >> b & 1), None)
            if s is None:
                return False
        return self.accept[s]

    def product(self, other: EagerDFA, mode: str, limit: int = 20_000) -> EagerDFA:
        """mode "and": both accept; "diff": self accepts and other does not."""
        out = EagerDFA()
        states = StateIndex(out, limit, "constraint too large to intersect")
        self_trans, other_trans = self.trans, other.trans

        def intern(a, b):
            acc_b = b >= 0 and other.accept[b]
            return states((a, b), self.accept[a] and (acc_b if mode == "and" else not acc_b))

        out.start = intern(self.start, other.start)
        while states.todo:
            checkpoint()
            a, b = states.todo.pop()
            i = states.index[(a, b)]
            other_tr = other_trans[b] if b >= 0 else []
            for cm, ta in self_trans[a]:
                rest = cm
                for cm2, tb in other_tr:
                    inter = cm & cm2
                    if inter:
                        rest &= ~cm2
                        out.trans[i].append((inter, intern(ta, tb)))
                if rest and mode == "diff":
                    out.trans[i].append((rest, intern(ta, -1)))
        return out.trimmed()

    def embed(self, nfa: NFA, s: int, e: int) -> None:
        """A copy of the DFA in `nfa`, entered from s, leaving to e from accepting states."""
        nfa.add_copy(self, s, e)

    def moves(self) -> tuple:
        """(sources, mask ids, targets, the distinct masks, accepting states): the DFA as
        arrays, computed once (the DFA no longer changes once embedded)."""
        hit = self.__dict__.get("_moves")
        if hit is None:
            trans = self.trans
            flat = [move for tr in trans for move in tr]
            index: dict[int, int] = {}
            setdefault = index.setdefault
            ids = [setdefault(cm, len(index)) for cm, _ in flat]
            tgt = [t for _, t in flat]
            sizes = np.fromiter(map(len, trans), np.int64, len(trans))
            hit = self._moves = (
                np.repeat(np.arange(len(trans), dtype=np.int64), sizes),
                np.array(ids, np.int64),
                np.array(tgt, np.int64),
                list(index),
                np.flatnonzero(np.array(self.accept, np.bool_)).astype(np.int64),
            )
        return hit

    def move_arrays(self) -> tuple:
        """moves() without the masks: (sources, mask ids, targets, accepting states)."""
        src, ids, tgt, _, accepting = self.moves()
        return src, ids, tgt, accepting


def intersect(a, b) -> tuple:
    return ("dfa", _determinised(a).product(_determinised(b), "and"))


def difference(a, b) -> tuple:
    return ("dfa", _determinised(a).product(_determinised(b), "diff"))


def _determinised(node) -> EagerDFA:
    return node[1] if node[0] == "dfa" else EagerDFA.from_node(node)
