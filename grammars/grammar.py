"""Compiled grammars and matchers.

A grammar is a set of rules; each rule's body is a byte-level expression that may reference
other rules. All rules share one NFA, determinised lazily (a DFA state is created the first time
a matcher reaches it). Matching runs a pushdown automaton whose stack frames are DFA states;
stacks and sets of stacks are interned to small integers, so a matcher state is one integer and
every transition and every token mask is memoised on the shared compiled grammar.

A token mask walks every frame the matcher may be in (the stacks reachable without reading)
through its rule's DFA: a compiled walk over the sorted vocabulary (lazydfa_walk.walk: shared
prefixes walked once, dead prefixes skipped, runs along loops and length counters jumped), plus
an exact check of the few tokens that may leave the frame (push or pop) on the way.
"""

from __future__ import annotations

import functools
import threading
from array import array

import numpy as np

from grammars import (
    boxes,
    counter_masks,
    fastcall,
    horizon,
    lazydfa,
    lazydfa_arrays,
    lazydfa_chain,
    lazydfa_walk,
    nfa_passes,
    pda,
    pda_leaving,
)
from grammars.array_dfa import LazyDFA
from grammars.automaton import NFA
from grammars.errors import GrammarError
from grammars.matcher import GrammarMatcher
from grammars.tokenizer_info import TokenizerInfo
from grammars.vocabulary import Vocabulary

_MAX_STACK_DEPTH = 2000
_MAX_JUMP = 4096
# memory a compiled grammar may hold in memoised masks and frame walks (both a bit per token;
# walks also their candidate ids); past it the cache starts over
_MASK_CACHE_BYTES = 64 << 20
_WALK_CACHE_BYTES = 8 << 20
_TOKEN_STEP_CAP = 1 << 16  # memoised (state, token) steps a grammar keeps (~6 MB), then anew
_NO_FOLLOW = np.zeros(256, np.bool_)
_NO_FATES = np.zeros(0, np.int8)
_MAX_FATES = 64  # the loops' suffix fates a Machine keeps (a byte a suffix: ~28 KB with
# Llama-3) with their words (16 KB)
_scratch = threading.local()  # buffers per thread for walks (_walk_scratch)
# states a token walk may add without growing the arrays: as many as the DFA has (at least
# _MIN_WALK_ROOM, at most _WALK_ROOM), so a small grammar's arrays stay small
_MIN_WALK_ROOM, _WALK_ROOM = 24, 128
_ROW_BLOCK = 32  # rows of masks or of frame walks per allocation (few to free with a grammar)
_FIRST_ROWS = 4  # rows of a grammar's first block of each
_MAX_FOLLOWS = 1 << 16  # _follow's arrays kept (256 bytes each), then the memo starts over
_NO_CANDIDATES = np.zeros(0, np.int64)
_NO_WORDS = np.zeros(0, np.uint32)
_NO_PREFIX = (  # walk's chain steps, when none
    np.zeros(0, np.int16),
    np.zeros(0, np.int64),
    (*(np.zeros(0, np.int64),) * 4, *(np.zeros(0, np.uint32),) * 2)
    + (*(np.zeros(0, np.int16),) * 2, np.zeros(0, np.int32))
    + (*(np.zeros(0, np.int16),) * 2, np.zeros(0, np.int32)),
)


class Machine:
    """Rules compiled into one NFA, frozen into arrays, with a lazily built DFA per rule (the
    states are built by lazydfa's compiled kernels; this class keeps Python views of them)."""

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
        for name in nfa.nts[1::3]:
            if name not in self.rule_index:
                raise GrammarError(f"reference to undefined rule {name!r}")
        self.names = names
        self.root = self.rule_index[root]
        self.counter_regions = counter_masks.counter_regions(nfa.copies, nfa.reps, rules)
        self.nfa_box, self.has_pushes = nfa_passes.frozen_graph(
            nfa, self.rule_index, names, self.root, starts, finals
        )
        del nfa  # the arrays hold everything from here on
        self.dfa, self.rule_start = lazydfa_arrays.started_dfa(self.nfa_box, starts)
        # the least length of each rule that is one embedded DFA (json_schema/counted.py's
        # blocks of long strings), which horizon.SharedChecks compares with the longest token
        self.dfa_min_lengths = {
            self.rule_index[name]: horizon.dfa_min_length(body[1])
            for name, body in rules.items()
            if body[0] == "dfa" and not isinstance(body[1], LazyDFA)  # not determinised here
        }
        self._live: dict[int, array] = {}
        self.unique = None  # a json_schema.unique.UniquePlan the matcher checks
        self._utf8_memo = np.zeros((0, 2), np.int64)  # lazydfa_chain._utf8_step's
        self._chain_memo = np.zeros((0, 5), np.int64)  # lazydfa_chain.extend_chain's
        self._fates: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # see walk

    @property
    def dfa(self) -> lazydfa.DFAArrays:
        return self._dfa

    @dfa.setter
    def dfa(self, arrays: lazydfa.DFAArrays) -> None:
        box = boxes.dfa_box(arrays)  # what the kernels are called with (made first: if that
        self._dfa, self.dfa_box = arrays, box  # fails, the old pair stays whole)

    @property
    def arrays(self) -> lazydfa.NFAArrays:
        """The NFA's arrays (the kernels read them from nfa_box; Python seldom does)."""
        return boxes.nfa_arrays(self.nfa_box)

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("nfa_box", "dfa_box")}
        state["nfa"] = tuple(self.arrays)
        return state

    def __setstate__(self, state: dict) -> None:
        self.nfa_box = boxes.nfa_box(lazydfa.NFAArrays(*state.pop("nfa")))
        self.__dict__.update(state)
        self.dfa = self._dfa

    # -- lazy DFA (lazydfa.py builds the states) -----------------------------------------------
    def _run(self, kernel, *args):
        """Call a kernel, growing the arrays and calling again while it runs out of room."""
        while True:
            out = fastcall.call(kernel, self.nfa_box, self.dfa_box, *args)
            code = out[0] if isinstance(out, tuple) else out
            if code != lazydfa.NEED_SPACE:
                return out
            self.dfa = lazydfa_arrays.grown(self.dfa)

    @property
    def accept(self) -> np.ndarray:
        return self.dfa.accept

    def live(self, g: int) -> array:
        """The bytes state g can read."""
        live = self._live.get(g)
        if live is None:
            if not self.dfa.done[g]:
                self._run(lazydfa.materialize, g)
            live = self._live[g] = array(
                "B", np.flatnonzero(self.dfa.table[g]).astype(np.uint8).tobytes()
            )
        return live

    def walk(
        self, g: int, follow: np.ndarray | None, vocab: Vocabulary, allowed: np.ndarray
    ) -> np.ndarray:
        """The candidate ids of every token walked from g (see lazydfa_walk.walk), the allowed
        ones set in `allowed` (zeroed uint32 words, a bit per token: the row the grammar keeps);
        `follow`: the bytes the frame below can read after a pop (None: it cannot)."""
        can_pop = follow is not None
        n = int(self.dfa.meta[lazydfa._STATES])
        room = min(max(n, _MIN_WALK_ROOM), _WALK_ROOM)
        if not lazydfa_arrays.has_room(self.dfa, room):  # grow now rather than walk twice
            self.dfa = lazydfa_arrays.grown(self.dfa, room)
        # chain_info's outputs (it sets every one, and the walk reads the chain as far as it
        # goes) and the walk's candidates, in arrays kept by thread (~5 µs a walk to make)
        candidates, info, in_chain, chain = _walk_scratch(vocab)
        track = bool(self.has_pushes or can_pop)
        states = n + room
        if len(self._utf8_memo) < states:  # the memos cover the states this walk may make
            # without growing the arrays (past them the kernels work without a memo), twice
            # over: rows for every state of the table (2,048) cost ~12 µs a first fill
            rows = max(2 * states, 64)
            self._utf8_memo = lazydfa_arrays.enlarged(self._utf8_memo, rows)
            self._chain_memo = lazydfa_arrays.enlarged(self._chain_memo, rows)
        self._run(
            lazydfa_chain.chain_info,
            g,
            can_pop,
            vocab.max_len,
            info,
            in_chain,
            self._utf8_memo,
            follow if can_pop else _NO_FOLLOW,
            chain,
            self._chain_memo,
        )
        slots = info.tolist()
        hub, length = slots[lazydfa_chain.HUB], slots[lazydfa_chain.LENGTH]
        utf8, utf8_from_g = slots[lazydfa_chain.UTF8], slots[lazydfa_chain.UTF8_FROM_G]
        chars = slots[lazydfa_chain.CHARS]
        layout, layout_box = vocab.boxed_chain_layout(in_chain, bool(utf8))
        fates, loop_words = _NO_FATES, _NO_WORDS
        if hub and not length:  # a loop: the fates of the rows' suffixes read from its hub
            # (lazydfa_walk._suffix_fates), the same for every state leading to it (each
            # position of a pattern searched for in a string: ~28,000 suffixes, Llama-3),
            # and the tokens all those states allow at once (lazydfa_walk._loop_words)
            key = (hub, follow.tobytes() if can_pop else None)
            kept = self._fates.get(key)
            if kept is None:
                if len(self._fates) >= _MAX_FATES:
                    self._fates.clear()
                # each suffix's slot written by _suffix_fates; the last, -1, says not yet
                fates = np.empty(len(layout.suffixes.ids) + 1, np.int8)
                fates[-1] = -1
                loop_words = np.empty(len(layout.full) + 8, np.uint32)
                kept = self._fates[key] = (fates, loop_words)
            fates, loop_words = kept
        prefix, long_rows, fits = _NO_PREFIX
        if hub and length > 0 and (length < vocab.max_len or chars):  # a counter's prefix,
            # however short: a counter's last states otherwise walked the whole trie (~0.4 ms
            # with SmolLM2), and one of characters its multi-byte tokens (~1.5 ms, Llama-3)
            prefix, long_rows, fits = vocab.chain_steps(in_chain, length, bool(utf8))
        n_cand = self._run(
            lazydfa_walk.walk,
            g,
            vocab.trie_box,
            vocab.max_len,
            hub,
            bool(utf8),
            bool(utf8_from_g),
            layout_box,
            can_pop,
            follow if can_pop else _NO_FOLLOW,
            track,
            allowed,
            candidates,
            prefix,
            fits,
            long_rows,
            length,
            chars,
            chain,
            self._chain_memo,
            fates,
            loop_words,
        )
        return candidates[:n_cand].copy() if n_cand else _NO_CANDIDATES


class CompiledGrammar:
    """Immutable from the outside and shared by every matcher, in any thread; caches grow as
    states are met (one lock per grammar guards their growth; cached lookups take no lock)."""

    def __init__(self, machine: Machine, vocab: Vocabulary, description: str = ""):
        self.machine = machine
        self.vocab = vocab
        self.description = description
        self._pda = pda.new_arrays(_MAX_STACK_DEPTH)
        self._rule_start = np.array(machine.rule_start, np.int64)
        trie = vocab.trie  # as pda_leaving.checked_leaving reads it
        self._trie = (trie.data, trie.ptr, trie.ids, vocab.row_of)
        # Python copies of what the arrays hold, for lookups without a compiled call
        # (kept without tuples where they can be: every object kept is one more for the cyclic
        # collector to count and walk, and its collections land in fills and compiles)
        self._closures: dict[int, int | tuple[int, ...]] = {}  # the members (one: an int)
        self._complete: dict[int, bool] = {}
        self._steps: dict[int, int] = {}
        self._live: dict[int, list[int]] = {}
        self._follows: dict[int, np.ndarray] = {}  # stack -> _follow's booleans
        self._masks: dict[int, np.ndarray] = {}
        # masks and walks from blocks of their own: a cache cleared frees its blocks
        self._mask_rows = _RowBlocks(vocab.words)
        self._walk_rows = _RowBlocks(vocab.words)
        # state * vocabulary size + token id -> the state after it, for ordinary tokens read
        # once (int keys: no tuples to allocate, and nothing for the cyclic collector)
        self._token_steps: dict[int, int] = {}
        # frame walks by g (int), or by g and the bytes below (bytes); in a grammar with length
        # counters by g or its counter description (CounterMasks.frame_key), paired with the
        # bytes below: allowed rows, candidates (two dicts: no tuple of arrays kept per walk)
        self._walks: dict[int | bytes | tuple, np.ndarray] = {}
        self._walk_candidates: dict[int | bytes | tuple, np.ndarray] = {}
        self._lock = threading.RLock()
        self._mask_cap = max(256, _MASK_CACHE_BYTES // (4 * vocab.words))
        self._walk_bytes = 0  # held by _walks (packed tokens and candidate ids)
        self._shared_checks = horizon.SharedChecks(machine, vocab.max_len)  # no cycle: freed
        # with the grammar as soon as the last reference goes
        regions = machine.counter_regions
        self._counted = counter_masks.CounterMasks(regions, vocab.max_len) if len(regions) else None
        root = machine.rule_start[machine.root]
        with self._lock:
            self.initial = self._call(pda.initial_set, root)
            self._closure_read(self.initial)

    @property
    def _pda(self) -> pda.PDAArrays:
        return self._pda_arrays

    @_pda.setter
    def _pda(self, arrays: pda.PDAArrays) -> None:
        box = boxes.pda_box(arrays)  # what the kernels are called with (made first, as above)
        self._pda_arrays, self._pda_box = arrays, box

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self)

    # -- pushdown automaton (pda.py builds the stacks, sets, closures and steps) ---------------
    def _call(self, kernel, *args) -> int:
        """Call a pda kernel (under the lock), growing the arrays and calling again while it
        runs out of room."""
        m = self.machine
        while True:
            out = fastcall.call(
                kernel, m.nfa_box, m.dfa_box, self._pda_box, self._rule_start, *args
            )
            if out >= 0:
                return out
            if out == lazydfa.NEED_SPACE:
                m.dfa = lazydfa_arrays.grown(m.dfa)
            elif out == pda.PDA_SPACE:
                self._pda = pda.grown(self._pda)
            else:
                raise GrammarError("grammar nesting too deep")

    def _frame(self, sid: int) -> tuple[int, int]:
        """Stack sid's top frame (a DFA state) and parent stack (-1: none)."""
        p = self._pda
        return int(p.st_g[sid]), int(p.st_parent[sid])

    def closure(self, ss: int) -> tuple[tuple[int, ...], bool]:
        """Stacks reachable without reading a byte (push rules, pop finished ones) and whether
        the whole grammar can end here."""
        members = self._closures.get(ss)
        if members is None:
            with self._lock:
                members = self._closures.get(ss)
                if members is None:
                    self._call(pda.closure, ss)
                    members = self._closure_read(ss)
        return ((members,) if members.__class__ is int else members), self._complete[ss]

    def _closure_read(self, ss: int) -> int | tuple[int, ...]:
        """Set ss's closure, made in the arrays, kept in the dicts closure() reads."""
        p = self._pda
        a, n = int(p.cl_start[ss]), int(p.cl_len[ss])
        self._complete[ss] = bool(p.cl_complete[ss])  # first: read unlocked in closure()
        members = p.cl_mem[a : a + n].tolist()
        members = self._closures[ss] = members[0] if n == 1 else tuple(members)
        return members

    def step(self, ss: int, b: int) -> int:
        key = ss << 8 | b
        out = self._steps.get(key)
        if out is None:
            with self._lock:
                out = self._steps[key] = self._call(pda.step, ss, b)
        return out

    def walk(self, ss: int, data: bytes) -> int:
        steps = self._steps
        for i, b in enumerate(data):
            nxt = steps.get(ss << 8 | b)  # step(), without the call when known
            if nxt is None:  # the rest in one compiled call
                with self._lock:
                    return self._call(pda.walk, ss, np.frombuffer(data[i:], np.uint8))
            ss = nxt
            if not ss:
                return 0
        return ss

    def is_complete(self, ss: int) -> bool:
        complete = self._complete.get(ss)
        return self.closure(ss)[1] if complete is None else complete

    def live_bytes(self, ss: int) -> list[int]:
        """The bytes set ss can read, in order."""
        out = self._live.get(ss)
        if out is None:
            row = np.empty(256, np.bool_)
            with self._lock:
                self._call(pda.set_reads, ss, row)
            out = self._live[ss] = np.flatnonzero(row).tolist()
        return out

    # -- masks --------------------------------------------------------------------------------
    def mask(self, ss: int) -> np.ndarray:
        words = self._masks.get(ss)
        if words is None:
            with self._lock:
                words = self._masks.get(ss)
                if words is None:
                    if len(self._masks) >= self._mask_cap:  # bound memory on long-lived grammars
                        self._masks.clear()
                        if self._counted is not None:
                            self._counted.clear()
                    words = self._masks[ss] = self._counted_mask(ss)
        return words

    def _counted_mask(self, ss: int) -> np.ndarray:
        """The mask of ss, shared with the sets that only differ in positions of length counters
        that no token tells apart (counter_masks)."""
        counted = self._counted
        if counted is None:
            return self._compute_mask(ss)
        members, complete = self.closure(ss)
        key = counted.key(self, members, complete)
        words = counted.masks.get(key) if key is not None else None
        if words is None:
            words = self._compute_mask(ss)
            if key is not None:
                counted.masks[key] = words
        else:
            counted.shared += 1
        return words

    def _compute_mask(self, ss: int) -> np.ndarray:
        members, complete = self.closure(ss)
        words = None
        # every stack reachable without reading (pushed rules, popped frames) walks its own
        # frame; walks then only need to look for pushes and pops after the first byte
        for sid in members:
            g, parent = self._frame(sid)
            follow = None if parent < 0 else self._follow(parent)
            frame, candidates = self._walk_frame(g, follow)
            if words is None:
                if len(members) == 1 and not complete and not len(candidates):
                    return frame.view("<i4")  # the walk itself: neither is ever changed
                # bit t of word w: token 32w + t; the first frame's walk is copied into it (a
                # row is ~16 KB with Llama-3: zeroing it first cost a pass of its own)
                words = self._mask_rows.new(zero=False)
                words[:] = frame
            else:
                words |= frame
            if not len(candidates):
                continue
            shared = self._shared_checks
            if shared.applies(self, parent):
                _set_bits(words, shared.found(self, sid, g, parent, follow, candidates))
            else:  # those another stack allowed need no check
                self._checked_leaving(sid, g, parent, follow, candidates, words)
        if words is None:  # no stack: nothing allowed
            words = self._mask_rows.new()
        if complete:
            _set_bits(words, self.vocab.eos_ids)
        return words.view("<i4")

    def _checked_leaving(self, sid, g, parent, follow, candidates, words=None) -> np.ndarray:
        """The candidates (tokens leaving frame g of stack sid, whose stack below is parent,
        reading the bytes of `follow`) that stack sid reads to the end, in one compiled call
        (pda_leaving.checked_leaving); with `words` (a mask row), only those not set there
        are checked, and those found are set there."""
        in_place = words is not None
        out = np.empty(len(candidates), np.int64)
        n = self._call(
            pda_leaving.checked_leaving,
            sid,
            g,
            parent,
            _NO_FOLLOW if follow is None else follow,
            candidates,
            words if in_place else _NO_WORDS,
            in_place,
            self._trie,
            out,
        )
        return out[:n] if in_place else out[:n].copy()

    def _follow(self, parent: int) -> np.ndarray:
        """The bytes stack `parent` can read, as 256 booleans (kept by stack: never changed)."""
        follow = self._follows.get(parent)
        if follow is None:
            if len(self._follows) >= _MAX_FOLLOWS:
                self._follows.clear()
            follow = np.empty(256, np.bool_)
            with self._lock:  # one compiled call: its set, closure and each frame's bytes
                self._call(pda.parent_reads, parent, follow)
            self._follows[parent] = follow
        return follow

    def _walk_frame(self, g: int, follow: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Every token run through the DFA of the frame on top: (allowed, candidates), the
        tokens that stay in the frame and the ids that died after passing, past their first
        byte, a state where a push, or a pop followed by a byte the frame below can read
        (`follow`, None: no frame below), could have saved them (to be checked exactly;
        pushes and pops before the first byte are other stacks of the closure, walked on
        their own)."""
        counted = self._counted
        if counted is None:
            key = g if follow is None else g.to_bytes(8, "little") + follow.tobytes()
        else:  # frames that no token tells apart (positions of a length counter) walk alike
            frame = counted.frame_key(self.machine.dfa, g)
            key = frame if follow is None else (frame, follow.tobytes())
        row = self._walks.get(key)
        if row is None:
            row = self._walk_rows.new()
            candidates = self.machine.walk(g, follow, self.vocab, row)
            size = row.nbytes + candidates.nbytes
            if self._walk_bytes + size > _WALK_CACHE_BYTES:
                self._walks.clear()
                self._walk_candidates.clear()
                self._walk_bytes = 0
            self._walk_candidates[key] = candidates
            self._walks[key] = row
            self._walk_bytes += size
            return row, candidates
        return row, self._walk_candidates[key]

    def token_key(self, ss: int, token_id: int) -> int | None:
        """The key of (state, token) in the memoised token steps; None for an id out of range."""
        size = self.vocab.size
        return ss * size + token_id if 0 <= token_id < size else None

    def remember_token(self, key: int, nxt: int) -> None:
        if len(self._token_steps) >= _TOKEN_STEP_CAP:
            self._token_steps.clear()
        self._token_steps[key] = nxt

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


def texts_accepted(rules: dict[str, tuple], root: str, texts: list[bytes]) -> list[bool]:
    """Whether the grammar of `rules` accepts each of `texts` whole, read byte by byte."""
    grammar = CompiledGrammar(Machine(rules, root), _byte_vocabulary())
    out = []
    for data in texts:
        ss = grammar.walk(grammar.initial, data)
        out.append(bool(ss) and grammar.is_complete(ss))
    return out


@functools.cache
def _byte_vocabulary() -> Vocabulary:
    tokens = tuple(bytes([b]) for b in range(256))
    return Vocabulary(TokenizerInfo(tokens, frozenset(), frozenset(), "byte_level"))


class _RowBlocks:
    """Zeroed rows of `width` uint32 words carved from blocks of _ROW_BLOCK rows (the first
    block _FIRST_ROWS: most grammars keep few masks, and a large block costs ~10 µs to make
    and to free): the many masks or walks a grammar keeps are then few allocations, quick to
    free with it."""

    __slots__ = ("width", "rest")

    def __init__(self, width: int):
        self.width = width
        self.rest = None  # the rows not handed out yet (None before the first block)

    def new(self, zero: bool = True) -> np.ndarray:
        """A row; with zero=False uninitialised, for a caller that writes all of it."""
        if self.rest is None or not len(self.rest):
            rows = _FIRST_ROWS if self.rest is None else _ROW_BLOCK
            # uninitialised, each row zeroed when handed out: a block from the heap (freed
            # blocks' size raises malloc's mmap threshold) is not zero, and calloc would clear
            # every row of it at once, most of them never used
            self.rest = np.empty((rows, self.width), np.uint32)
        row = self.rest[0]
        if zero:
            row.fill(0)
        self.rest = self.rest[1:]
        return row


def _walk_scratch(vocab: Vocabulary) -> tuple[np.ndarray, ...]:
    """This thread's arrays for Machine.walk with `vocab`: the candidates, chain_info's five
    slots, its bytes of the chain and the chain (vocab.max_len + 1 states)."""
    kept = getattr(_scratch, "walk", None)
    if kept is None or len(kept[0]) < vocab.size or len(kept[3]) != vocab.max_len + 1:
        kept = _scratch.walk = (  # (the chain's length is the walk's depth: extend_chain)
            np.empty(max(vocab.size, len(kept[0]) if kept else 0), np.int64),
            np.empty(5, np.int64),
            np.empty(256, np.bool_),
            np.empty(vocab.max_len + 1, np.int64),
        )
    return kept


def _set_bits(words: np.ndarray, tokens: np.ndarray) -> None:
    """Set the bits of `tokens` in `words` (uint32, bit t of word w: token 32w + t)."""
    if len(tokens):
        fastcall.call(lazydfa_walk.set_bits, words, np.ascontiguousarray(tokens, np.int64))
