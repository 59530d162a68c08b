"""EagerDFAs whose per-state lists are made only if an operation asks for them (an
intersection, a difference): ArrayDFA is built straight into the arrays the NFA copies it from
(EagerDFA.moves), for automata with thousands of regular states such as length counters, whose
every step numpy lays out at once; LazyDFA is an expression embedded in the NFA as it is, left
to the lazy DFA of the grammar, and determinised here only on demand.
"""

from __future__ import annotations

import numpy as np

from grammars.automaton import NFA, EagerDFA


def packed_masks(masks: list[int]) -> np.ndarray:
    """Byte masks (256-bit integers) as rows of 32 little-endian bytes."""
    packed = b"".join(m.to_bytes(32, "little") for m in masks)
    return np.frombuffer(packed, np.uint8).reshape(len(masks), 32)


def unpacked_masks(rows: np.ndarray) -> list[int]:
    """packed_masks' rows as the byte masks (256-bit integers) again."""
    data = rows.tobytes()
    return [int.from_bytes(data[i : i + 32], "little") for i in range(0, len(data), 32)]


def mask_bytes(dfa) -> np.ndarray:
    """The distinct masks of dfa.moves() as packed_masks rows, made once per DFA (kept on it,
    as moves() is: DFAs cached across compiles pay for this once)."""
    hit = dfa.__dict__.get("_mask_bytes")
    if hit is None:
        hit = dfa._mask_bytes = packed_masks(dfa.moves()[3])
    return hit


class ArrayDFA(EagerDFA):
    """An EagerDFA given by its moves: `trans` is made from them when asked for."""

    def __init__(
        self,
        src,
        mask_ids,
        tgt,
        masks: list[int] | None,
        accept: np.ndarray,
        start: int,
        packed=None,
    ):
        """`packed`: the masks as packed_masks rows, where the maker has them; with them,
        `masks` may be None, made from the rows when first asked for."""
        if packed is not None:
            self._mask_bytes = packed
        elif masks is None:
            raise ValueError("an ArrayDFA needs its masks, or their packed rows")
        self.accept = accept.tolist()
        self.start = start
        self._moves = (src, mask_ids, tgt, masks, np.flatnonzero(accept).astype(np.int64))

    @classmethod
    def from_table(
        cls, table: np.ndarray, packed: np.ndarray, accept: list, accepting: np.ndarray, start: int
    ):
        """The DFA of a (3, k) move table (sources, mask ids, targets) whose masks are given
        as packed rows only (made into a list on need);
        `accepting`: the states `accept` (a list of flags) holds, as an int64 array."""
        dfa = cls.__new__(cls)
        dfa._mask_bytes = packed
        dfa.accept = accept
        dfa.start = start
        dfa._moves = (table[0], table[1], table[2], None, accepting)
        return dfa

    @property
    def n_states(self) -> int:
        return len(self.accept)

    def moves(self) -> tuple:
        moves = self._moves
        if moves[3] is None:
            moves = self._moves = (*moves[:3], unpacked_masks(self._mask_bytes), moves[4])
        return moves

    def move_arrays(self) -> tuple:
        src, ids, tgt, _, accepting = self._moves  # without making the masks
        return src, ids, tgt, accepting

    @property
    def trans(self) -> list[list[tuple[int, int]]]:
        """Made anew on each use (not kept: see compact); EagerDFA's operations take it once."""
        src, ids, tgt, masks, _ = self.moves()
        out: list[list[tuple[int, int]]] = [[] for _ in range(len(self.accept))]
        for s, i, t in zip(src.tolist(), ids.tolist(), tgt.tolist()):
            out[s].append((masks[i], t))
        return out


def compact(dfa: EagerDFA) -> ArrayDFA:
    """`dfa` as its moves only, for DFAs kept in caches: arrays are no work for the cyclic
    garbage collector, where per-state lists of tuples are walked at every collection."""
    src, ids, tgt, masks, _ = dfa.moves()
    return ArrayDFA(src, ids, tgt, masks, np.array(dfa.accept, np.bool_), dfa.start)


def counter_dfa(char: EagerDFA, lo: int, hi: int | None) -> EagerDFA:
    """Strings of lo..hi words of `char` (hi None: unbounded), where `char` is a trimmed DFA of
    one word whose accepting states have no moves: one copy of char's other states per count
    of words read (0 .. hi, where hi None: counts from lo on are alike); after hi words, only
    the state between words (mid-word states there could never finish)."""
    finals = [s for s, a in enumerate(char.accept) if a]
    inner = [s for s, a in enumerate(char.accept) if not a]
    order = [char.start] + [s for s in inner if s != char.start]
    local = {s: i for i, s in enumerate(order)}
    k = len(order)
    masks: dict[int, int] = {}
    rows = []  # (source, mask id, target, ends a word) within one count
    for s in order:
        for cm, t in char.trans[s]:
            mask_id = masks.setdefault(cm, len(masks))
            rows.append((local[s], mask_id, 0 if t in finals else local[t], t in finals))
    src, ids, tgt, ends = (np.array(c, np.int64) for c in zip(*rows)) if rows else ([],) * 4
    ends = np.asarray(ends, np.bool_)
    top = hi if hi is not None else lo
    counts = np.arange(top, dtype=np.int64)[:, None]  # the counts that read more words
    base = counts * k
    all_src = [(base + src).ravel()]
    all_ids = [np.broadcast_to(ids, (top, len(ids))).ravel()]
    all_tgt = [(base + np.where(ends, k, tgt)).ravel()]  # a word ends: the next count
    n_states = top * k + 1
    if hi is None:  # the last count reads on and stays
        all_src.append(top * k + src)
        all_ids.append(ids)
        all_tgt.append(top * k + tgt)
        n_states = (top + 1) * k
    accept = np.zeros(n_states, np.bool_)
    accept[np.arange(lo, top + 1) * k] = True
    out = ArrayDFA(
        np.concatenate(all_src),
        np.concatenate(all_ids),
        np.concatenate(all_tgt),
        list(masks),
        accept,
        0,
    )
    out.counter = (k, lo, hi)  # the numbering counter_masks reads
    return out


class LazyDFA(EagerDFA):
    """The DFA of an expression without rule references (a pattern), determinised on first
    use of its states; embedded in a grammar, the expression itself is built into the NFA."""

    def __init__(self, node: tuple, size_hint: int):
        self.node = node
        self._size_hint = size_hint  # what to report as its size while not determinised
        self._dfa: EagerDFA | None = None

    def determinised(self) -> EagerDFA:
        if self._dfa is None:
            self._dfa = EagerDFA.from_node(self.node)
        return self._dfa

    @property
    def n_states(self) -> int:
        return self._dfa.n_states if self._dfa is not None else self._size_hint

    @property
    def trans(self) -> list[list[tuple[int, int]]]:
        return self.determinised().trans

    @property
    def accept(self) -> list[bool]:
        return self.determinised().accept

    @property
    def start(self) -> int:
        return self.determinised().start

    def moves(self) -> tuple:
        return self.determinised().moves()

    def move_arrays(self) -> tuple:
        return self.determinised().move_arrays()

    def embed(self, nfa: NFA, s: int, e: int) -> None:
        nfa.build(self.node, s, e)
