"""The token vocabulary laid out for mask computation, built once per tokenizer."""

from __future__ import annotations

import numpy as np

from grammars.tokenizer_info import TokenizerInfo


class Vocabulary:
    """Token bytes three ways: by id, sorted (for trie walks by bisection) and as a byte matrix
    ordered by decreasing length (for vectorised walks: column i holds byte i of the first
    col_counts[i] tokens)."""

    def __init__(self, info: TokenizerInfo, vocab_size: int | None = None):
        self.info = info
        self.size = max(vocab_size or 0, info.vocab_size)
        self.words = (self.size + 31) // 32
        tb = list(info.token_bytes) + [b""] * (self.size - info.vocab_size)
        self.token_bytes = tb
        self.special_set = frozenset(info.special_ids) | frozenset(
            range(info.vocab_size, self.size)
        )
        self.eos_ids = np.array(sorted(info.eos_ids), np.int64)
        self.eos_set = frozenset(info.eos_ids)
        usable = [i for i in range(self.size) if tb[i] and i not in self.special_set]
        by_len = sorted(usable, key=lambda i: -len(tb[i]))
        self.walk_ids = np.array(by_len, np.int64)
        width = len(tb[by_len[0]]) if by_len else 1
        joined = b"".join(tb[i].ljust(width, b"\0") for i in by_len)
        self.walk_bytes = np.frombuffer(joined, np.uint8).reshape(len(by_len), width)
        lengths = np.array([len(tb[i]) for i in by_len], np.int64)
        ordered = sorted(usable, key=lambda i: tb[i])
        self.sorted_bytes = [tb[i] for i in ordered]
        self.sorted_ids = ordered
        self.walk_lengths = lengths
        self.layout = (self.walk_ids, np.ascontiguousarray(self.walk_bytes.T), lengths)
        self._loops: dict[tuple[int, bool], tuple] = {}
        # tails: every token of two bytes or more without its first byte
        multi = lengths > 1
        self.first_byte = self.walk_bytes[:, 0]
        self.first_of_id = np.zeros(self.size, np.int16) - 1
        self.first_of_id[self.walk_ids] = self.first_byte
        self.tail_layout = (
            self.walk_ids[multi],
            np.ascontiguousarray(self.walk_bytes[multi, 1:].T),
            lengths[multi] - 1,
        )
        eos = np.zeros(self.size, bool)
        eos[self.eos_ids] = True
        self.eos_only = self.pack(eos)

    def pack(self, allowed: np.ndarray) -> np.ndarray:
        """Boolean array over the vocabulary -> int32 words (bit i of word w = token 32w+i)."""
        packed = np.packbits(allowed, bitorder="little")
        out = np.zeros(self.words * 4, np.uint8)
        out[: len(packed)] = packed
        return out.view("<i4").copy()

    def unpack(self, words: np.ndarray) -> np.ndarray:
        bits = np.unpackbits(np.asarray(words, "<i4").view(np.uint8), bitorder="little")
        return bits[: self.size].astype(bool)

    def subset_by_first_byte(self, first: np.ndarray, layout=None):
        """The rows of a layout (default: the whole vocabulary) whose first byte is allowed.
        A layout is (ids, column-major byte matrix [width, n], lengths), rows sorted by
        decreasing length; the result is (layout, selected row indices)."""
        layout = layout or self.layout
        cols = layout[1]
        sel = np.nonzero(first[cols[0]])[0] if cols.shape[1] else np.zeros(0, np.int64)
        return layout, sel

    def loop_split(self, loop_mask: int, skip_first: bool = False):
        """For a state that loops on the bytes of `loop_mask`: the tokens made only of those
        bytes (a boolean array over the vocabulary), and the layout of the others as suffixes
        starting at their first byte outside the loop. With skip_first, the same for the tokens'
        tails (their bytes after the first; single-byte tokens count as inside). Cached."""
        key = (loop_mask, skip_first)
        hit = self._loops.get(key)
        if hit is not None:
            return hit
        in_loop = np.array([loop_mask >> b & 1 for b in range(256)], bool)
        offset = 1 if skip_first else 0
        width = self.walk_bytes.shape[1]
        pos = np.arange(width)[None, :]
        valid = (pos < self.walk_lengths[:, None]) & (pos >= offset)
        outside = valid & ~in_loop[self.walk_bytes]
        leaves = outside.any(axis=1)
        inside = np.zeros(self.size, bool)
        inside[self.walk_ids[~leaves]] = True
        rows = np.nonzero(leaves)[0]
        start = outside[rows].argmax(axis=1)
        suffix_len = self.walk_lengths[rows] - start
        order = np.argsort(-suffix_len, kind="stable")
        rows, start, suffix_len = rows[order], start[order], suffix_len[order]
        w = int(suffix_len[0]) if len(rows) else 1
        cols = np.minimum(start[:, None] + np.arange(w)[None, :], width - 1)
        mat = self.walk_bytes[rows[:, None], cols]
        layout = (self.walk_ids[rows], np.ascontiguousarray(mat.T), suffix_len)
        hit = self._loops[key] = (inside, layout, self.walk_bytes[rows, 0])
        return hit
