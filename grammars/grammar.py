"""Compiled grammars and matchers.

A grammar is a set of rules; each rule's body is a byte-level expression that may reference
other rules. All rules share one NFA, determinised lazily (a DFA state is created the first time
a matcher reaches it). Matching runs a pushdown automaton whose stack frames are DFA states;
stacks and sets of stacks are interned to small integers, so a matcher state is one integer and
every transition and every token mask is memoised on the shared compiled grammar.

Token masks use two strategies:
- a depth-first walk of the sorted vocabulary (bisect ranges stand for trie nodes) when few
  bytes can come next;
- otherwise a vectorised walk of every token through the top frame's dense byte table, plus
  an exact check of the few tokens that may leave the frame (push or pop) on the way.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from grammars import fastwalk
from grammars.automaton import NFA, byte_classes, mask_bytes
from grammars.errors import GrammarError
from grammars.vocabulary import Vocabulary

_BYTES = [bytes((b,)) for b in range(256)]
_DFS_MAX_LIVE_BYTES = 8
_DFS_BUDGET = 60
_MAX_STACK_DEPTH = 2000
_MAX_JUMP = 4096
_MAX_CACHED_MASKS = 20_000
_SCALAR_TAIL = 24  # tokens left in a vectorised walk below which plain Python is faster


class Machine:
    """Rules compiled into one NFA with a lazily built DFA per rule."""

    def __init__(self, rules: dict[str, tuple], root: str):
        names = list(rules)
        if root not in rules:
            raise GrammarError(f"unknown start rule {root!r}")
        self.rule_index = {n: i for i, n in enumerate(names)}
        nfa = NFA()
        starts, finals = [], []
        for name in names:
            s, e = nfa.new(), nfa.new()
            nfa.build(rules[name], s, e)
            starts.append(s)
            finals.append(e)
        for edges in nfa.nts:
            for name, _ in edges:
                if name not in self.rule_index:
                    raise GrammarError(f"reference to undefined rule {name!r}")
        self.nfa = nfa
        self.names = names
        self.root = self.rule_index[root]
        self._prune(starts, finals)
        self._check_left_recursion(starts, finals)
        self.finals = frozenset(finals)
        # DFA state 0 is the dead state
        self.index: dict[frozenset, int] = {}
        self.sets: list[frozenset] = [frozenset()]
        self.nt_edges: list[tuple] = [()]
        self.rows: list[list[int] | None] = [[0] * 256]
        self.live: list[list[int] | None] = [[]]
        cap = 256
        self.table = np.zeros((cap, 256), np.int32)
        self.viable = np.zeros((cap, 256), bool)
        self.accept = np.zeros(cap, bool)
        self.done = np.zeros(cap, bool)
        self.done[0] = True
        self._first: dict[int, int] = {}
        self.rule_start = [self.state(nfa.closure([s])) for s in starts]
        self.has_pushes = any(nfa.nts)

    # -- construction checks ------------------------------------------------------------------
    def _prune(self, starts, finals) -> None:
        """Remove every NFA state that cannot reach its rule's end, and references to rules
        that cannot match anything."""
        nfa = self.nfa
        n = len(nfa.eps)
        rev: list[list[int]] = [[] for _ in range(n)]
        for s in range(n):
            for t in nfa.eps[s]:
                rev[t].append(s)
            for _, t in nfa.edges[s]:
                rev[t].append(s)
        nt_rev: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for s in range(n):
            for name, t in nfa.nts[s]:
                nt_rev[t].append((self.rule_index[name], s))
        productive: set[int] = set()
        while True:
            live = set(finals)
            todo = list(finals)
            while todo:
                t = todo.pop()
                preds = list(rev[t]) + [s for r, s in nt_rev[t] if r in productive]
                for s in preds:
                    if s not in live:
                        live.add(s)
                        todo.append(s)
            now = {r for r, s in enumerate(starts) if s in live}
            if now == productive:
                break
            productive = now
        if self.root not in productive:
            raise GrammarError("the constraint admits no value at all")
        for s in range(n):
            if s not in live:
                nfa.eps[s], nfa.edges[s], nfa.nts[s] = [], [], []
                continue
            nfa.eps[s] = [t for t in nfa.eps[s] if t in live]
            nfa.edges[s] = [(m, t) for m, t in nfa.edges[s] if t in live]
            nfa.nts[s] = [
                (nm, t) for nm, t in nfa.nts[s] if t in live and self.rule_index[nm] in productive
            ]
        nfa._closures.clear()

    def _check_left_recursion(self, starts, finals) -> None:
        nfa = self.nfa
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for r, s in enumerate(starts):
                if r not in nullable and finals[r] in self._eps_reach(s, nullable):
                    nullable.add(r)
                    changed = True
        calls = {}
        for r, s in enumerate(starts):
            reach = self._eps_reach(s, nullable)
            calls[r] = {self.rule_index[nm] for x in reach for nm, _ in nfa.nts[x]}
        for r in range(len(starts)):
            seen, todo = set(), list(calls[r])
            while todo:
                x = todo.pop()
                if x == r:
                    raise GrammarError(f"left recursion in rule {self.names[r]!r}")
                if x not in seen:
                    seen.add(x)
                    todo.extend(calls[x])

    def _eps_reach(self, s: int, nullable: set[int]) -> set[int]:
        nfa = self.nfa
        seen, todo = {s}, [s]
        while todo:
            x = todo.pop()
            nxt = list(nfa.eps[x]) + [t for nm, t in nfa.nts[x] if self.rule_index[nm] in nullable]
            for t in nxt:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    # -- lazy DFA -----------------------------------------------------------------------------
    def state(self, members: frozenset) -> int:
        g = self.index.get(members)
        if g is not None:
            return g
        if not members:
            return 0
        g = len(self.sets)
        self.index[members] = g
        self.sets.append(members)
        self.rows.append(None)
        self.live.append(None)
        self.nt_edges.append(())
        if g >= len(self.accept):
            self._grow()
        self.accept[g] = not members.isdisjoint(self.finals)
        pushes: dict[int, list[int]] = {}
        for n in members:
            for name, t in self.nfa.nts[n]:
                pushes.setdefault(self.rule_index[name], []).append(t)
        if pushes:
            self.nt_edges[g] = tuple(
                (r, self.state(self.nfa.closure(ts))) for r, ts in pushes.items()
            )
        return g

    def _grow(self) -> None:
        cap = len(self.accept) * 2
        for name in ("table", "viable"):
            old = getattr(self, name)
            new = np.zeros((cap, 256), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for name in ("accept", "done"):
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def materialize(self, g: int) -> list[int]:
        row = self.rows[g]
        if row is not None:
            return row
        edges = [edge for n in self.sets[g] for edge in self.nfa.edges[n]]
        row = [0] * 256
        for cm, targets in byte_classes(edges):
            t = self.state(self.nfa.closure(targets))
            for b in mask_bytes(cm):
                row[b] = t
        self.rows[g] = row
        self.table[g] = row
        self.live[g] = [b for b in range(256) if row[b]]
        if self.nt_edges[g]:
            first = 0
            for r, _ in self.nt_edges[g]:
                first |= self.first(r)
            self.viable[g] = np.array([first >> b & 1 for b in range(256)], bool)
        self.done[g] = True
        return row

    def first(self, r: int) -> int:
        """Bytes that can start rule r (all bytes when r can be empty: then what follows counts)."""
        if r in self._first:
            return self._first[r]
        self._first[r] = (1 << 256) - 1  # conservative while computing (recursion)
        g = self.rule_start[r]
        self.materialize(g)
        mask = 0
        for b in self.live[g]:
            mask |= 1 << b
        if self.accept[g]:
            mask = (1 << 256) - 1
        for r2, _ in self.nt_edges[g]:
            mask |= self.first(r2)
        self._first[r] = mask
        return mask


class CompiledGrammar:
    """Immutable from the outside and shared by every matcher; caches grow as states are met."""

    def __init__(self, machine: Machine, vocab: Vocabulary, description: str = ""):
        self.machine = machine
        self.vocab = vocab
        self.description = description
        self._stack_index: dict[tuple[int, int], int] = {}
        self._stacks: list[tuple[int, int]] = []
        self._depth: list[int] = []
        self._set_index: dict[frozenset, int] = {frozenset(): 0}
        self._sets: list[frozenset] = [frozenset()]
        self._closures: dict[int, tuple[tuple[int, ...], bool]] = {}
        self._steps: dict[int, int] = {}
        self._live: dict[int, list[int]] = {}
        self._masks: dict[int, np.ndarray] = {}
        self._walks: dict[tuple[int, bool], tuple[np.ndarray, np.ndarray]] = {}
        root = machine.rule_start[machine.root]
        self.initial = self._stackset(frozenset([self._stack(root, -1)]))

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self)

    # -- interning ----------------------------------------------------------------------------
    def _stack(self, g: int, parent: int) -> int:
        key = (g, parent)
        sid = self._stack_index.get(key)
        if sid is None:
            depth = 1 + (self._depth[parent] if parent >= 0 else 0)
            if depth > _MAX_STACK_DEPTH:
                raise GrammarError("grammar nesting too deep")
            sid = self._stack_index[key] = len(self._stacks)
            self._stacks.append(key)
            self._depth.append(depth)
        return sid

    def _stackset(self, members: frozenset) -> int:
        ss = self._set_index.get(members)
        if ss is None:
            ss = self._set_index[members] = len(self._sets)
            self._sets.append(members)
        return ss

    # -- pushdown automaton -------------------------------------------------------------------
    def closure(self, ss: int) -> tuple[tuple[int, ...], bool]:
        """Stacks reachable without reading a byte (push rules, pop finished ones) and whether
        the whole grammar can end here."""
        hit = self._closures.get(ss)
        if hit is not None:
            return hit
        m = self.machine
        todo = list(self._sets[ss])
        seen = set(todo)
        complete = False
        while todo:
            sid = todo.pop()
            g, parent = self._stacks[sid]
            for r, ret in m.nt_edges[g]:
                child = self._stack(m.rule_start[r], self._stack(ret, parent))
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
            if m.accept[g]:
                if parent < 0:
                    complete = True
                elif parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        hit = self._closures[ss] = (tuple(seen), complete)
        return hit

    def step(self, ss: int, b: int) -> int:
        key = ss << 8 | b
        out = self._steps.get(key)
        if out is not None:
            return out
        m = self.machine
        nxt = set()
        for sid in self.closure(ss)[0]:
            g, parent = self._stacks[sid]
            row = m.rows[g] or m.materialize(g)
            t = row[b]
            if t:
                nxt.add(self._stack(t, parent))
        out = self._steps[key] = self._stackset(frozenset(nxt))
        return out

    def walk(self, ss: int, data: bytes) -> int:
        step = self.step
        for b in data:
            ss = step(ss, b)
            if not ss:
                return 0
        return ss

    def is_complete(self, ss: int) -> bool:
        return self.closure(ss)[1]

    def live_bytes(self, ss: int) -> list[int]:
        out = self._live.get(ss)
        if out is None:
            m = self.machine
            mask = set()
            for sid in self.closure(ss)[0]:
                g = self._stacks[sid][0]
                if m.rows[g] is None:
                    m.materialize(g)
                mask.update(m.live[g])
            out = self._live[ss] = sorted(mask)
        return out

    # -- masks --------------------------------------------------------------------------------
    def mask(self, ss: int) -> np.ndarray:
        words = self._masks.get(ss)
        if words is None:
            if len(self._masks) >= _MAX_CACHED_MASKS:  # bound memory on long-lived grammars
                self._masks.clear()
                self._walks.clear()
            words = self._masks[ss] = self._compute_mask(ss)
        return words

    def _compute_mask(self, ss: int) -> np.ndarray:
        vocab = self.vocab
        allowed = np.zeros(vocab.size, bool)
        ids = None
        if len(self.live_bytes(ss)) <= _DFS_MAX_LIVE_BYTES:
            ids = self._dfs(ss)
        if ids is not None:
            allowed[ids] = True
        else:
            # every stack reachable without reading (pushed rules, popped frames) walks its own
            # frame; walks then only need to look for pushes and pops after the first byte
            for sid in self.closure(ss)[0]:
                g, parent = self._stacks[sid]
                inside, alive, candidates = self._walk_frame(g, parent >= 0)
                if inside is not None:
                    allowed |= inside
                allowed[alive] = True
                if len(candidates):
                    single = self._stackset(frozenset([sid]))
                    tb = vocab.token_bytes
                    for tid in candidates.tolist():
                        if not allowed[tid] and self.walk(single, tb[tid]):
                            allowed[tid] = True
        if self.is_complete(ss):
            allowed[vocab.eos_ids] = True
        return vocab.pack(allowed)

    def _dfs(self, ss: int) -> list[int] | None:
        sb, sids = self.vocab.sorted_bytes, self.vocab.sorted_ids
        out: list[int] = []
        todo = [(ss, b"", 0, len(sb))]
        visited = 0
        while todo:
            state, prefix, lo, hi = todo.pop()
            visited += 1
            if visited > _DFS_BUDGET:
                return None
            if prefix:
                while lo < hi and sb[lo] == prefix:
                    out.append(sids[lo])
                    lo += 1
                if lo >= hi:
                    continue
            for b in self.live_bytes(state):
                p2 = prefix + _BYTES[b]
                a = bisect_left(sb, p2, lo, hi)
                if a >= hi or not sb[a].startswith(p2):
                    continue
                z = bisect_left(sb, prefix + _BYTES[b + 1], a, hi) if b < 255 else hi
                nxt = self.step(state, b)
                if nxt:
                    todo.append((nxt, p2, a, z))
        return out

    def _walk_frame(self, g: int, can_pop: bool):
        """Every token run through the DFA of the frame on top. Returns (inside, alive,
        candidates): a boolean array of tokens that loop on g (or None), the ids that stay in
        the frame, and the ids that died after passing, past their first byte, a state where a
        push or pop could have saved them (to be checked exactly; pushes and pops before the
        first byte are other stacks of the closure, walked on their own)."""
        key = (g, can_pop)
        hit = self._walks.get(key)
        if hit is not None:
            return hit
        m, vocab = self.machine, self.vocab
        row = m.rows[g] or m.materialize(g)
        crossable = bool(m.nt_edges[g]) or (can_pop and bool(m.accept[g]))
        loop = 0
        if not crossable:
            for b in m.live[g]:
                if row[b] == g:
                    loop |= 1 << b
        first = np.asarray(row, np.int32) != 0
        if loop:
            inside, layout, _ = vocab.loop_split(loop)
            layout, sel = vocab.subset_by_first_byte(first, layout)
        elif not crossable and not m.has_pushes and len({row[b] for b in m.live[g]}) <= 4:
            hit = self._walks[key] = self._walk_after_first_byte(g, row)
            return hit
        else:
            inside = None
            layout, sel = vocab.subset_by_first_byte(first)
        alive, candidates = self._column_walk(g, can_pop, layout, sel)
        hit = self._walks[key] = (inside, alive, candidates)
        return hit

    def _walk_after_first_byte(self, g: int, row: list[int]):
        """For a state without a self-loop: group tokens by the state their first byte leads
        to; where that state loops, tokens whose tail stays in the loop are in at once and only
        the others are walked (from where they leave the loop)."""
        m, vocab = self.machine, self.vocab
        inside = np.zeros(vocab.size, bool)
        alive_parts, cand_parts = [], []
        by_first: dict[int, list[int]] = {}
        for b in m.live[g]:
            by_first.setdefault(row[b], []).append(b)
        single = vocab.walk_lengths == 1
        for t, bytes_in in by_first.items():
            t_row = m.rows[t] or m.materialize(t)
            firsts = np.zeros(256, bool)
            firsts[bytes_in] = True
            loop = 0
            if not m.nt_edges[t]:
                for b in m.live[t]:
                    if t_row[b] == t:
                        loop |= 1 << b
            if loop:
                tail_inside, layout, lead = vocab.loop_split(loop, skip_first=True)
                group = np.zeros(vocab.size, bool)
                group[vocab.walk_ids[firsts[vocab.first_byte]]] = True
                inside |= tail_inside & group
                sel = np.nonzero(firsts[lead])[0]
                nxt_first = np.asarray(t_row, np.int32) != 0
                sel = sel[nxt_first[layout[1][0][sel]]] if len(sel) else sel
                alive, cand = self._column_walk(t, False, layout, sel)
            else:
                ids, cols, lengths = vocab.tail_layout
                lead = vocab.first_of_id[ids]
                sel = np.nonzero(firsts[lead])[0]
                alive, cand = self._column_walk(t, False, vocab.tail_layout, sel)
                ones = vocab.walk_ids[single & firsts[vocab.first_byte]]
                alive = np.concatenate([alive, ones])
            alive_parts.append(alive)
            cand_parts.append(cand)
        alive = np.concatenate(alive_parts) if alive_parts else np.zeros(0, np.int64)
        cand = np.concatenate(cand_parts) if cand_parts else np.zeros(0, np.int64)
        return inside, alive, cand

    def _column_walk(self, g, can_pop, layout, act):
        """Run the selected rows of a token layout (sorted by decreasing length) from state g,
        dropping each token as soon as it dies or ends."""
        if fastwalk.AVAILABLE:
            return fastwalk.walk(self.machine, g, can_pop, layout, act)
        m = self.machine
        ids, cols, lengths = layout
        final = np.zeros(len(ids), np.int32)
        viable = np.zeros(len(ids), bool)
        s = np.full(len(act), g, np.int64)
        neg_len = -lengths
        track = m.has_pushes or can_pop
        for i in range(cols.shape[0] if len(act) else 0):
            k = int(np.searchsorted(neg_len.take(act), -i, side="left"))
            if k < len(act):
                final[act[k:]] = s[k:]
                act, s = act[:k], s[:k]
            if not k:
                break
            done = m.done.take(s)
            if not done.all():
                for x in np.unique(s[~done]).tolist():
                    m.materialize(x)
            if k <= _SCALAR_TAIL:  # few left: finish them one by one
                self._finish_scalar(act, s, i, cols, lengths, final, viable, can_pop, track)
                act = act[:0]
                s = s[:0]
                break
            flat = s * 256 + cols[i].take(act)
            if track and i:
                v = m.viable.reshape(-1).take(flat)
                if can_pop:
                    v |= m.accept.take(s)
                viable[act] |= v
            s = m.table.reshape(-1).take(flat)
            keep = s != 0
            if not keep.all():
                act, s = act[keep], s[keep]
        final[act] = s
        alive = final != 0
        return ids[alive], ids[~alive & viable]

    def _finish_scalar(self, act, s, start, cols, lengths, final, viable, can_pop, track):
        m = self.machine
        for row_index, state in zip(act.tolist(), s.tolist()):
            column = cols[:, row_index]
            for i in range(start, int(lengths[row_index])):
                b = int(column[i])
                if track and i and (m.viable[state, b] or (can_pop and m.accept[state])):
                    viable[row_index] = True
                row = m.rows[state] or m.materialize(state)
                state = row[b]
                if not state:
                    break
            final[row_index] = state

    def jump_forward_bytes(self, ss: int) -> bytes:
        out = bytearray()
        while len(out) < _MAX_JUMP and ss:
            if self.is_complete(ss):
                break
            live = self.live_bytes(ss)
            if len(live) != 1:
                break
            out.append(live[0])
            ss = self.step(ss, live[0])
        return bytes(out)


def _utf8_prefix(data: bytes) -> str:
    """The longest prefix of `data` made of whole UTF-8 characters."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="ignore")


class GrammarMatcher:
    """The state of one generation: cheap to create, rolls back, never changes on refusal."""

    def __init__(self, grammar: CompiledGrammar):
        self.grammar = grammar
        self._history: list[int] = [grammar.initial]
        self._terminated = False

    @property
    def state(self) -> int:
        return self._history[-1]

    def accept_token(self, token_id: int) -> bool:
        g = self.grammar
        if self._terminated:
            return False
        if token_id in g.vocab.eos_set:
            if g.is_complete(self.state):
                self._terminated = True
                self._history.append(self.state)
                return True
            return False
        if not 0 <= token_id < g.vocab.size or token_id in g.vocab.special_set:
            return False
        data = g.vocab.token_bytes[token_id]
        if not data:
            return False
        nxt = g.walk(self.state, data)
        if not nxt:
            return False
        self._history.append(nxt)
        return True

    def accept_string(self, text: str | bytes) -> bool:
        data = text.encode("utf-8") if isinstance(text, str) else text
        if self._terminated:
            return not data
        nxt = self.grammar.walk(self.state, data) if data else self.state
        if not nxt:
            return False
        self._history.append(nxt)
        return True

    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        g = self.grammar
        words = g.vocab.eos_only if self._terminated else g.mask(self.state)
        target = bitmask
        if not isinstance(bitmask, np.ndarray):  # a torch tensor
            if bitmask.device.type != "cpu":
                row = bitmask[index] if bitmask.dim() == 2 else bitmask
                row.zero_()
                row[: len(words)].copy_(_to_torch(words, bitmask.device))
                return
            target = bitmask.numpy()
        row = target[index] if target.ndim == 2 else target
        row[: len(words)] = words
        row[len(words) :] = 0

    def next_token_mask(self) -> np.ndarray:
        """The allowed token ids as a boolean array over the vocabulary."""
        g = self.grammar
        words = g.vocab.eos_only if self._terminated else g.mask(self.state)
        return g.vocab.unpack(words)

    def is_terminated(self) -> bool:
        return self._terminated

    def is_completed(self) -> bool:
        """The text so far is a complete match (EOS would be accepted)."""
        return self._terminated or self.grammar.is_complete(self.state)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0 or num_tokens >= len(self._history):
            raise ValueError(
                f"cannot roll back {num_tokens} tokens ({len(self._history) - 1} accepted)"
            )
        if num_tokens:
            del self._history[-num_tokens:]
            self._terminated = False

    def find_jump_forward_string(self) -> str:
        if self._terminated:
            return ""
        return _utf8_prefix(self.grammar.jump_forward_bytes(self.state))

    def reset(self) -> None:
        self._history = [self.grammar.initial]
        self._terminated = False


def _to_torch(words: np.ndarray, device):
    import torch

    return torch.from_numpy(words).to(device)
