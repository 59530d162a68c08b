"""The token vocabulary laid out for mask computation, built once per tokenizer."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from grammars import boxes, lazydfa
from grammars.lazydfa import njit
from grammars.lazydfa_chain import CHAR_STEPS
from grammars.tokenizer_info import TokenizerInfo

_MAX_CACHED_CHAINS = 64  # chain layouts kept per vocabulary
# chain steps kept (vocabulary.chain_steps): two bytes a token for each byte set (a 128k
# vocabulary: 256 KB each)
_MAX_CACHED_STEPS = 64
_FAR = 32767  # chain_steps: a run that does not fit (int16)


class TokenTrie(NamedTuple):
    """Token byte strings sorted, as a trie without nodes: row j is data[ptr[j]:ptr[j + 1]],
    shares its first lcp[j] bytes with row j - 1, and the rows starting with byte b are
    group[b]:group[b + 1]. ids[j] is the token of row j."""

    ids: np.ndarray
    data: np.ndarray
    ptr: np.ndarray
    lcp: np.ndarray
    group: np.ndarray
    ends: np.ndarray


def make_trie(ids: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> TokenTrie:
    """The trie of rows[i, :lengths[i]] (a byte matrix padded on the right)."""
    width = rows.shape[1] if len(ids) else 1
    padded = np.where(np.arange(width)[None, :] < lengths[:, None], rows.astype(np.int16), -1)
    order = np.lexsort(padded.T[::-1]) if len(ids) else np.zeros(0, np.int64)
    padded, lengths = padded[order], lengths[order]
    differ = padded[1:] != padded[:-1]
    lcp = np.zeros(len(ids), np.int64)
    if len(ids) > 1:
        # rows equal on every column are duplicates: they share the whole row
        lcp[1:] = np.where(differ.any(axis=1), differ.argmax(axis=1), lengths[1:])
    ptr = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    valid = padded >= 0
    data = padded[valid].astype(np.uint8)  # row-major: each row's bytes in order
    firsts = padded[:, 0] if len(ids) else np.zeros(0, np.int16)
    group = np.searchsorted(firsts, np.arange(257), side="left").astype(np.int64)
    ends = lazydfa.subtree_ends(ptr, lcp)
    return TokenTrie(np.asarray(ids, np.int64)[order], data, ptr, lcp, group, ends)


class ChainLayout(NamedTuple):
    """The trie seen from a chain of states that each send every byte of a mask to the next
    (see lazydfa_walk.walk). exits[j]: the first position after the first byte where row j leaves
    the mask (its length if never); full: bit id set where the token never leaves (packed as
    masks are; lazydfa.chain_stays);
    rows[k]: the rows starting with a byte of the mask (or a UTF-8 lead byte) that leave it
    later, by first byte, then by exit and the byte there, then in trie order, each sharing
    lcp[k] bytes with the one before, those starting with byte b at group[b]:group[b + 1]."""

    exits: np.ndarray
    full: np.ndarray
    rows: np.ndarray
    lcp: np.ndarray
    group: np.ndarray
    in_mask: np.ndarray  # the mask as 256 booleans
    suffix_of: np.ndarray  # suffix_of[k]: the id of rows[k]'s bytes from its exit on
    suffixes: TokenTrie  # those suffixes, each once (ids: their ids)
    run_end: np.ndarray  # run_end[k]: the first row after k of another first byte, exit or
    # byte at its exit


def _exit_suffixes(trie: TokenTrie, rows: np.ndarray, exits: np.ndarray):
    """The bytes of each row of `rows` from its exit on, numbered each once, and their trie."""
    suffix_of, data, ptr, lcp = _sorted_suffixes(trie.data, trie.ptr, rows, exits)
    n = len(ptr) - 1
    firsts = data[ptr[:-1]] if n else np.zeros(0, np.uint8)  # every suffix has a byte
    group = np.searchsorted(firsts, np.arange(257), side="left").astype(np.int64)
    ends = lazydfa.subtree_ends(ptr, lcp)
    return suffix_of, TokenTrie(np.arange(n, dtype=np.int64), data, ptr, lcp, group, ends)


@njit(cache=True, nogil=True)
def _before(data, a, la, b, lb):
    """data[a:a + la] sorts before data[b:b + lb] (bytewise, a prefix first)."""
    for i in range(min(la, lb)):
        x, y = data[a + i], data[b + i]
        if x != y:
            return x < y
    return la < lb


@njit(cache=True, nogil=True)
def _sorted_suffixes(data, ptr, rows, exits):
    """The bytes of each row from its exit on (never empty), sorted and each kept once: (the
    number of each row's suffix, their bytes, their offsets, the bytes each shares with the
    one before), as make_trie lays a trie out. A merge sort of offsets: the suffixes were
    Python bytes sorted by lexsort over 128 columns, ~45 ms with Llama-3's tokens per mask."""
    n = rows.shape[0]
    start = np.empty(n, np.int64)
    size = np.empty(n, np.int64)
    for k in range(n):
        start[k] = ptr[rows[k]] + exits[k]
        size[k] = ptr[rows[k] + 1] - start[k]
    # the first 7 bytes (zeros past the end) and the length up to 7 in one number, which
    # orders the suffixes as their bytes do but for ties, compared byte by byte
    key = np.zeros(n, np.uint64)
    for k in range(n):
        x = np.uint64(0)
        for i in range(7):
            x = x << np.uint64(8)
            if i < size[k]:
                x |= np.uint64(data[start[k] + i])
        key[k] = (x << np.uint64(8)) | np.uint64(min(size[k], 7))
    order = np.arange(n)
    spare = np.empty(n, np.int64)
    width = 1
    while width < n:  # bottom-up, stable
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j < hi and i < mid:
                    a, b = order[i], order[j]
                    take_i = key[a] < key[b] or (
                        key[a] == key[b] and not _before(data, start[b], size[b], start[a], size[a])
                    )
                else:
                    take_i = j >= hi
                if take_i:
                    spare[k] = order[i]
                    i += 1
                else:
                    spare[k] = order[j]
                    j += 1
        order, spare = spare, order
        width *= 2
    suffix_of = np.empty(n, np.int64)
    out_ptr = np.zeros(n + 1, np.int64)
    lcp = np.zeros(n, np.int64)
    out = np.empty(size.sum(), np.uint8)
    m = 0  # distinct suffixes so far
    for k in range(n):
        r = order[k]
        if m:
            p = order[k - 1]
            same = 0
            limit = min(size[r], size[p])
            while same < limit and data[start[r] + same] == data[start[p] + same]:
                same += 1
            if same == size[r] and same == size[p]:  # the one before, again
                suffix_of[r] = m - 1
                continue
            lcp[m] = same
        a = out_ptr[m]
        for i in range(size[r]):
            out[a + i] = data[start[r] + i]
        out_ptr[m + 1] = a + size[r]
        suffix_of[r] = m
        m += 1
    return suffix_of, out[: out_ptr[m]], out_ptr[: m + 1].copy(), lcp[:m].copy()


class Vocabulary:
    """Token bytes by id and as a sorted trie (for mask walks), built once per tokenizer."""

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
        width = max((len(tb[i]) for i in usable), default=1)
        joined = b"".join(tb[i].ljust(width, b"\0") for i in usable)
        rows = np.frombuffer(joined, np.uint8).reshape(len(usable), width)
        lengths = np.array([len(tb[i]) for i in usable], np.int64)
        self.trie = make_trie(np.array(usable, np.int64), rows, lengths)
        self.row_of = np.zeros(self.size, np.int64)  # each usable token's row in the trie
        self.row_of[self.trie.ids] = np.arange(len(self.trie.ids))
        self.trie_box = boxes.trie_box(self.trie)  # as the token walk takes it
        self.max_len = int(width)
        self._chains: dict[tuple[bytes, bool], tuple[ChainLayout, object]] = {}  # with its box
        self._steps: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._chars: np.ndarray | None = None  # see _characters
        eos = np.zeros(self.size, bool)
        eos[self.eos_ids] = True
        self.eos_only = self.pack(eos)

    def __getstate__(self) -> dict:
        """A copy's state: no box (a numba object; made again from the trie) and no cached
        layouts (made again as the copy's walks need them)."""
        state = dict(self.__dict__)
        del state["trie_box"]
        state["_chains"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.trie_box = boxes.trie_box(self.trie)

    def pack(self, allowed: np.ndarray) -> np.ndarray:
        """Boolean array over the vocabulary -> int32 words (bit i of word w = token 32w+i)."""
        packed = np.packbits(allowed, bitorder="little")
        if len(packed) == self.words * 4:
            return packed.view("<i4")
        out = np.zeros(self.words * 4, np.uint8)
        out[: len(packed)] = packed
        return out.view("<i4").copy()

    def unpack(self, words: np.ndarray) -> np.ndarray:
        bits = np.unpackbits(np.asarray(words, "<i4").view(np.uint8), bitorder="little")
        return bits[: self.size].astype(bool)

    def chain_layout(self, in_mask: np.ndarray, utf8: bool = False) -> ChainLayout:
        """The ChainLayout of the trie for a set of bytes (`in_mask`, 256 booleans), where with
        utf8 well-formed multi-byte characters count as staying in the set (cached)."""
        return self.boxed_chain_layout(in_mask, utf8)[0]

    def boxed_chain_layout(self, in_mask: np.ndarray, utf8: bool = False) -> tuple:
        """chain_layout(in_mask, utf8) and its box (grammars/boxes.py), as the walk takes it."""
        key = (in_mask.tobytes(), utf8)
        hit = self._chains.get(key)
        if hit is None:
            if len(self._chains) >= _MAX_CACHED_CHAINS:
                self._chains.clear()
            in_mask = np.array(in_mask, np.bool_)  # a copy, kept in the layout
            trie = self.trie
            exits = lazydfa.chain_exits(trie.data, trie.ptr, in_mask)
            starts_in, stays = self._stays(in_mask, utf8)
            full = np.zeros(self.size, np.bool_)
            full[trie.ids[starts_in & stays]] = True
            full = self.pack(full).view(np.uint32)  # the walk's bits, copied at once
            rows = np.nonzero(starts_in & ~stays)[0]
            # by first byte, then where they leave and the byte they leave by (then in trie
            # order): the rows of such a run all live or die together at that byte
            firsts, where = trie.data[trie.ptr[rows]], exits[rows]
            leave = trie.data[trie.ptr[rows] + where]
            order = np.lexsort((leave, where, firsts))
            rows, firsts, where, leave = rows[order], firsts[order], where[order], leave[order]
            lcp = lazydfa.shared_prefixes(trie.data, trie.ptr, rows)
            group = np.searchsorted(firsts, np.arange(257)).astype(np.int64)
            suffix_of, suffixes = _exit_suffixes(trie, rows, where)
            starts = _starts(firsts) | _starts(where) | _starts(leave)  # where a run starts
            run_end = _run_ends(starts).astype(np.int64)
            layout = ChainLayout(
                exits, full, rows, lcp, group, in_mask, suffix_of, suffixes, run_end
            )
            hit = self._chains[key] = (layout, boxes.layout_box(layout))
        return hit

    def _stays(self, in_mask: np.ndarray, utf8: bool) -> tuple[np.ndarray, np.ndarray]:
        """For each trie row: (it starts with a byte of the mask, or with utf8 a UTF-8 lead
        byte; it never leaves the mask, lazydfa.chain_stays)."""
        trie = self.trie
        firsts = trie.data[trie.ptr[:-1]]
        starts_in = in_mask[firsts] | (utf8 & (firsts >= 0xC2) & (firsts <= 0xF4))
        return starts_in, lazydfa.chain_stays(trie.data, trie.ptr, in_mask, utf8)

    def _whole_rows(self, in_mask: np.ndarray, utf8: bool) -> np.ndarray:
        """The rows that start in the mask and never leave it (see _stays)."""
        starts_in, stays = self._stays(in_mask, utf8)
        return np.nonzero(starts_in & stays)[0]

    def chain_steps(self, in_mask: np.ndarray, length: int, utf8: bool = False):
        """For a chain of `length` states over the bytes of `in_mask` that is not a loop (a
        counter): (steps: the states a token takes along the chain, its bytes when it never
        leaves the mask, minus its characters when it holds multi-byte UTF-8 characters (the
        last one possibly cut short) and bytes of the mask, else 0, by trie row (the walk reads
        them in trie order: by id, a cache miss a row); the rows that never leave the mask but
        are longer than `length`; fits: the ids whose steps are positive and those whose steps
        are negative, each sorted by the absolute steps, with those steps, so that the tokens a
        chain allows at once are a prefix of each, and each set's bits (as masks), then
        _fitting_runs over the rows of chain_layout(in_mask, utf8) and over the trie's rows:
        the walk passes over a run of multi-byte tokens that all fit at once (Llama-3 has
        ~29,000 such tokens, which it visited one by one). Cached per mask and utf8, the rows a
        slice of them sorted by length."""
        key = (in_mask.tobytes(), utf8)
        hit = self._steps.get(key)
        if hit is None:
            if len(self._steps) >= _MAX_CACHED_STEPS:
                self._steps.clear()
            whole, words = self._whole_rows(in_mask, False), self._whole_rows(in_mask, True)
            trie = self.trie
            steps = np.zeros(self.size, np.int16)
            steps[trie.ids[words]] = -self._characters()[words]
            lengths = trie.ptr[whole + 1] - trie.ptr[whole]
            steps[trie.ids[whole]] = lengths
            # (stable sorts of 16-bit keys are radix sorts: ~1 ms over 128k tokens, not ~5)
            order = np.argsort(-lengths.astype(np.int16), kind="stable")
            fits = []
            for sign in (1, -1):
                ids = np.flatnonzero(sign * steps > 0)
                by = np.argsort(sign * steps[ids], kind="stable")
                fits += [ids[by], sign * steps[ids[by]].astype(np.int64)]
            fits += [self.pack(steps > 0).view(np.uint32), self.pack(steps < 0).view(np.uint32)]
            by_row = steps[trie.ids]
            layout = self.chain_layout(in_mask, utf8)
            exit_steps = by_row[layout.rows]
            fits += _fitting_runs(exit_steps, layout.lcp, _starts(layout.run_end))
            firsts = trie.data[trie.ptr[:-1]]
            fits += _fitting_runs(by_row, trie.lcp, _starts(firsts))
            hit = self._steps[key] = (by_row, whole[order], -lengths[order], tuple(fits))
        steps, rows, shorter, fits = hit  # shorter: minus the rows' lengths, ascending
        return steps, rows[: np.searchsorted(shorter, -length)], fits

    def _characters(self) -> np.ndarray:
        """Each trie row's bytes that are not UTF-8 continuation bytes (its characters, when
        it is well-formed UTF-8, a last one cut short counted)."""
        if self._chars is None:
            trie = self.trie
            tails = np.zeros(len(trie.data) + 1, np.int64)
            np.cumsum((trie.data >= 0x80) & (trie.data < 0xC0), out=tails[1:])
            ptr = trie.ptr
            self._chars = (ptr[1:] - ptr[:-1]) - (tails[ptr[1:]] - tails[ptr[:-1]])
        return self._chars


def _starts(keys: np.ndarray) -> np.ndarray:
    """Where a row's key differs from the one before (the first row: True)."""
    out = np.ones(len(keys), np.bool_)
    out[1:] = keys[1:] != keys[:-1]
    return out


def _fitting_runs(steps: np.ndarray, lcp: np.ndarray, starts: np.ndarray) -> tuple:
    """Rows (with chain_steps `steps`, sharing lcp[k] bytes with the one before, in groups
    that begin where `starts`) cut into runs of rows that hold multi-byte characters, at most
    CHAR_STEPS of them (those a chain may take at once, lazydfa_chain.chain_info), and runs
    of the others: for each row k, (the most characters over rows k.. to the end of k's run,
    _FAR in a run of others; the fewest bytes rows k + 1.. to that end share with the one
    before, _FAR: none; the end of k's run)."""
    words = (steps < 0) & (steps >= -CHAR_STEPS)
    end = _run_ends(starts | _starts(words)).astype(np.int32)
    return (*_run_suffixes(np.where(words, -steps, _FAR), lcp, end), end)


def _run_ends(starts: np.ndarray) -> np.ndarray:
    """For each row, the row where its run ends (runs begin where `starts`, the first row
    among them)."""
    bounds = np.append(np.flatnonzero(starts), len(starts))
    return np.repeat(bounds[1:], np.diff(bounds))


@njit(cache=True, nogil=True)
def _run_suffixes(chars, lcp, run_end):
    """For rows in runs (run_end[k]: the end of row k's run): the most of `chars` over rows
    k.. to the end of k's run, and the fewest of `lcp` over rows k + 1.. to that end (_FAR:
    none)."""
    n = chars.shape[0]
    most = np.empty(n, np.int16)
    fewest = np.empty(n, np.int16)
    for k in range(n - 1, -1, -1):
        if k + 1 < run_end[k]:  # not the last of its run
            most[k] = max(chars[k], most[k + 1])
            fewest[k] = min(lcp[k + 1], fewest[k + 1])
        else:
            most[k] = chars[k]
            fewest[k] = _FAR
    return most, fewest
