"""String lengths counted without unrolling: counters of characters, long bounds counted in
blocks of characters (one rule per bound), and long bounds beside a pattern.

A pattern such as ^data:image/png;base64,[A-Za-z0-9+/=]*$ is a part of bounded length, one
unbounded run of a single character class, and another bounded part. Beside maxLength 32767
its automaton times a counter would take millions of states; written as each length of the
first part, then the run counted in blocks (_long_chars, for that class), then each length of
the last part, it takes a few rules.
"""

from __future__ import annotations

import functools
import hashlib

from grammars.array_dfa import counter_dfa
from grammars.automaton import NOTHING, EagerDFA, alt, cat, lit, rep
from grammars.errors import GrammarError
from grammars.regex import ANY_CHAR, counted_split, json_chars, regex_to_node

_STRING_CHAR = json_chars(ANY_CHAR)
_MAX_PART_BYTES = 256  # the longest bounded part, in bytes of its JSON spelling
_MAX_LENGTH_PAIRS = 64  # (length before, length after) alternatives


def counted_pattern(patterns: tuple, lo: int, hi: int | None, rules: dict) -> tuple | None:
    """The inside of a string matching `patterns` with lo..hi characters, where the one
    pattern that constrains anything is split by regex.counted_split; None for other patterns
    (or too many lengths)."""
    patterns = tuple(p for p in patterns if not _matches_every_string(p))
    if not patterns:  # the lengths alone
        if is_long(lo, hi):
            return _long_chars(lo, hi, rules)
        return ("dfa", _length_dfa(lo, hi))
    if len(patterns) != 1 or not isinstance(patterns[0], str):
        return None
    try:
        split = counted_split(patterns[0])
        if split is None:
            return None
        before, char, least, after = split
        heads, tails = _by_length(before), _by_length(after)
    except GrammarError:
        return None
    if heads is None or tails is None or len(heads) * len(tails) > _MAX_LENGTH_PAIRS:
        return None
    key = hashlib.sha1(patterns[0].encode("utf-8", "surrogatepass")).hexdigest()[:16]
    char_dfa = EagerDFA.from_node(char)
    parts = []
    for a, head in heads.items():
        for b, tail in tails.items():
            low = max(least, lo - a - b)
            high = None if hi is None else hi - a - b
            if high is not None and high < low:
                continue
            if not is_long(low, high):
                run = ("dfa", counter_dfa(char_dfa, low, high))
            else:
                run = _long_chars(low, high, rules, (f"_{key}", char_dfa))
            parts.append(cat(("dfa", head), run, ("dfa", tail)))
    return alt(*parts) if parts else NOTHING


def _by_length(node) -> dict[int, EagerDFA] | None:
    """The texts of a bounded part by their number of characters (DFAs), or None when the
    part is unbounded or long."""
    dfa = EagerDFA.from_node(node)
    _, longest = dfa.path_lengths()
    if longest is None or longest > _MAX_PART_BYTES:
        return None
    out = {}
    for n in range(longest + 1):  # a character takes one byte or more
        exact = dfa.product(_length_dfa(n, n), "and")
        if not exact.is_empty():
            out[n] = exact
    return out


def _matches_every_string(pattern) -> bool:
    """The pattern finds a match in every string (an unanchored one that matches the empty
    string, as ([0-9a-z]+)? does): it constrains nothing."""
    if not isinstance(pattern, str):
        return False
    try:
        node = cat(lit('"'), regex_to_node(pattern, json_mode=True, search=True), lit('"'))
        return _any_string_dfa().product(EagerDFA.from_node(node), "diff").is_empty()
    except GrammarError:
        return False


@functools.lru_cache(maxsize=256)
def _length_dfa(lo: int, hi: int | None):
    """Strings of lo..hi characters (JSON spelling), laid out directly as a counter."""
    if lo > _MAX_UNROLLED or (hi is not None and hi > _MAX_UNROLLED):
        raise GrammarError(
            f"minLength/maxLength: lengths above {_MAX_UNROLLED} are not supported here"
        )
    return counter_dfa(_char_dfa(), lo, hi)


_MAX_UNROLLED = 10_000  # the longest count laid out as one counter
# Strings with a bound of _LONG characters or more are counted in blocks of _BLOCK characters,
# by a rule shared by all strings of the same bounds: a counter takes ~39 states per count at
# every use. A pop and a push at each block's end make the masks there slower (the tokens
# crossing it are checked one by one), so shorter bounds keep the counter. A block longer than
# twice the longest token (Llama-3's: 128 bytes) leaves positions in its first half that no
# token tells apart, which share one mask (grammars/counter_masks.py); with blocks of 128 every
# position of a block was a mask of its own with that vocabulary.
_BLOCK = 256
_LONG = 1024


def is_long(lo: int, hi: int | None) -> bool:
    """A length bound long enough to be counted in blocks (_long_chars)."""
    return max(lo, hi or 0) >= _LONG


def _long_chars(lo: int, hi: int | None, rules: dict, char: tuple | None = None) -> tuple:
    """The inside of a string of lo..hi characters when a bound is long: blocks of exactly
    _BLOCK characters (one rule, "chars_run_B_B", matched by pushing a frame) counted by a rule
    of its own per (lo, hi), then a tail of fewer than _BLOCK characters. A counter of n
    characters takes one copy of the character automaton (39 states) per count; this takes
    one per count of blocks, with no copy of the characters. The split of a length into
    blocks and a tail is unique, so a matcher follows at most a few frames at once. With
    `char` (a name, and the DFA of one character of a class), only characters of that class.
    Each counter (the block, each tail) is a rule of its own, matched by pushing a frame: a
    grammar holds each once however many long strings use it (a counter of 255 characters
    takes ~10,000 NFA states, and freezing the NFA costs in proportion)."""
    key, char_dfa = char or ("", None)
    name = f"chars{key}_{lo}_{'inf' if hi is None else hi}"

    def counted(a: int, b: int) -> tuple:
        run = f"chars{key}_run_{a}_{b}"
        if run not in rules:
            dfa = _length_dfa(a, b) if char_dfa is None else counter_dfa(char_dfa, a, b)
            rules[run] = ("dfa", dfa)
        return ("nt", run)

    if name not in rules:
        block = counted(_BLOCK, _BLOCK)
        skip = lo // _BLOCK  # blocks every string of lo.. characters starts with
        low = lo - skip * _BLOCK  # < _BLOCK
        high = None if hi is None else hi - skip * _BLOCK
        last = _BLOCK - 1
        if high is None:
            rest = alt(counted(low, last), cat(rep(block, 1, None), counted(0, last)))
        elif high < _BLOCK:
            rest = counted(low, high)
        else:
            full = high // _BLOCK  # the most blocks after the skipped ones
            parts = [counted(low, last)]  # no more blocks
            if full >= 2:  # 1 .. full - 1 blocks, then any tail
                parts.append(cat(rep(block, 1, full - 1), counted(0, last)))
            tail = high % _BLOCK
            parts.append(cat(rep(block, full, full), *([counted(0, tail)] if tail else [])))
            rest = alt(*parts)
        rules[name] = cat(rep(block, skip, skip), rest)
    return ("nt", name)


@functools.lru_cache(maxsize=1)
def _char_dfa():
    dfa = EagerDFA.from_node(_STRING_CHAR)
    assert not any(dfa.trans[s] for s in range(len(dfa.trans)) if dfa.accept[s])
    return dfa


@functools.lru_cache(maxsize=1)
def _any_string_dfa():
    """Any JSON string, determinised once: most schemas hold several."""
    return EagerDFA.from_node(cat(lit('"'), rep(_STRING_CHAR, 0, None), lit('"')))
