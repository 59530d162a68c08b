"""Python-syntax regular expressions to byte-level expression trees.

The pattern is parsed by the standard library's regex parser (`re._parser`), then every
character class becomes UTF-8 byte sequences. In "json" mode each character is spelled the way
it may appear inside a JSON string literal: itself (unless it must be escaped), a short escape
such as `\\n`, or `\\uXXXX` (any case of hex digits; astral characters as surrogate pairs).
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from re import _constants as C  # noqa: N812
from re import _parser

import numpy as np

from grammars.automaton import EMPTY, NOTHING, alt, byte_set, cat, lit, rep
from grammars.budget import checkpoint, watching_calls
from grammars.errors import GrammarError
from grammars.regex_anchors import AnchoredPattern, has_assertions

MAX_CODEPOINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
Ranges = list[tuple[int, int]]

DIGIT: Ranges = [(0x30, 0x39)]
WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE: Ranges = [
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
ANY_CHAR: Ranges = [(0, MAX_CODEPOINT)]
_SHORT_ESCAPES = {
    0x22: '"',
    0x5C: "\\",
    0x2F: "/",
    0x08: "b",
    0x0C: "f",
    0x0A: "n",
    0x0D: "r",
    0x09: "t",
}
_HEX = "0123456789abcdef"
MAX_GROUP_DEPTH = 128  # groups nested deeper are refused before the parser recurses into them
# an escape, or a character class (to the end of the text when unclosed, so it never fails
# and the scan stays linear)
_ESCAPE_OR_CLASS = re.compile(r"\\.|\[\^?\]?(?:[^\]\\]|\\.?)*\]?", re.DOTALL)


def normalize(ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def negate(ranges: Ranges) -> Ranges:
    out: Ranges = []
    cur = 0
    for lo, hi in normalize(ranges):
        if lo > cur:
            out.append((cur, lo - 1))
        cur = max(cur, hi + 1)
    if cur <= MAX_CODEPOINT:
        out.append((cur, MAX_CODEPOINT))
    return out


def intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo, hi in a:
        for lo2, hi2 in b:
            x, y = max(lo, lo2), min(hi, hi2)
            if x <= y:
                out.append((x, y))
    return normalize(out)


def utf8_sequences(lo: int, hi: int):
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of lo..hi."""
    if lo > hi:
        return
    if lo <= SURROGATES[1] and hi >= SURROGATES[0]:
        if lo < SURROGATES[0]:
            yield from utf8_sequences(lo, SURROGATES[0] - 1)
        if hi > SURROGATES[1]:
            yield from utf8_sequences(SURROGATES[1] + 1, hi)
        return
    for bound in (0x7F, 0x7FF, 0xFFFF):
        if lo <= bound < hi:
            yield from utf8_sequences(lo, bound)
            yield from utf8_sequences(bound + 1, hi)
            return
    if hi <= 0x7F:
        yield [(lo, hi)]
        return
    n = len(chr(lo).encode("utf-8"))
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if (lo & ~m) != (hi & ~m):
            if lo & m:
                yield from utf8_sequences(lo, lo | m)
                yield from utf8_sequences((lo | m) + 1, hi)
                return
            if hi & m != m:
                yield from utf8_sequences(lo, (hi & ~m) - 1)
                yield from utf8_sequences(hi & ~m, hi)
                return
    yield list(zip(chr(lo).encode("utf-8"), chr(hi).encode("utf-8")))


def _hex_sequences(lo: int, hi: int, ndigits: int = 4):
    """Digit ranges (most significant first) spelling lo..hi as fixed-width hex numbers."""
    for i in range(1, ndigits):
        m = (1 << (4 * i)) - 1
        if (lo >> (4 * i)) != (hi >> (4 * i)):
            if lo & m:
                yield from _hex_sequences(lo, lo | m, ndigits)
                yield from _hex_sequences((lo | m) + 1, hi, ndigits)
                return
            if hi & m != m:
                yield from _hex_sequences(lo, (hi & ~m) - 1, ndigits)
                yield from _hex_sequences(hi & ~m, hi, ndigits)
                return
    yield [((lo >> (4 * k)) & 15, (hi >> (4 * k)) & 15) for k in reversed(range(ndigits))]


def _hex_digit_set(lo: int, hi: int) -> int:
    mask = 0
    for d in range(lo, hi + 1):
        mask |= 1 << ord(_HEX[d])
        if d >= 10:
            mask |= 1 << ord(_HEX[d].upper())
    return mask


def _hex4(lo: int, hi: int) -> tuple:
    seqs = [cat(*(("b", _hex_digit_set(a, b)) for a, b in seq)) for seq in _hex_sequences(lo, hi)]
    return alt(*seqs)


def raw_chars(ranges: Ranges) -> tuple:
    """Any one character of `ranges`, as UTF-8 bytes."""
    seqs = []
    for i, (lo, hi) in enumerate(normalize(ranges)):
        if i & 1023 == 1023:
            checkpoint()
        for seq in utf8_sequences(lo, hi):
            seqs.append(cat(*(("b", byte_set(r)) for r in seq)))
    return alt(*seqs) if seqs else NOTHING


@functools.lru_cache(maxsize=4096)
def _raw_char(c: int) -> tuple:
    return raw_chars([(c, c)])


_MUST_ESCAPE: Ranges = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]


def json_chars(ranges: Ranges) -> tuple:
    """Any one character of `ranges`, spelled as it may appear inside a JSON string."""
    ranges = normalize(ranges)
    parts = [raw_chars(intersect_ranges(ranges, negate(_MUST_ESCAPE)))]
    short = [c for c in _SHORT_ESCAPES if intersect_ranges(ranges, [(c, c)])]
    if short:
        parts.append(cat(lit("\\"), ("b", byte_set(*(ord(_SHORT_ESCAPES[c]) for c in short)))))
    bmp = intersect_ranges(ranges, negate([SURROGATES, (0x10000, MAX_CODEPOINT)]))
    if bmp:
        parts.append(cat(lit("\\u"), alt(*(_hex4(lo, hi) for lo, hi in bmp))))
    astral = intersect_ranges(ranges, [(0x10000, MAX_CODEPOINT)])
    if astral:
        parts.append(alt(*(_surrogate_pairs(lo, hi) for lo, hi in astral)))
    return alt(*[p for p in parts if p != NOTHING])


def _surrogate_pairs(lo: int, hi: int) -> tuple:
    """The astral characters lo..hi as surrogate-pair escapes (\\uD83D\\uDE00 for U+1F600):
    a range of high surrogates, each with its range of low ones."""
    (h1, l1), (h2, l2) = divmod(lo - 0x10000, 0x400), divmod(hi - 0x10000, 0x400)

    def pairs(h_lo: int, h_hi: int, l_lo: int, l_hi: int) -> tuple:
        high, low = _hex4(0xD800 + h_lo, 0xD800 + h_hi), _hex4(0xDC00 + l_lo, 0xDC00 + l_hi)
        return cat(lit("\\u"), high, lit("\\u"), low)

    if h1 == h2:
        return pairs(h1, h1, l1, l2)
    parts = []
    if l1:  # the first high surrogate takes only part of its low ones
        parts.append(pairs(h1, h1, l1, 0x3FF))
        h1 += 1
    if l2 != 0x3FF:
        parts.append(pairs(h2, h2, 0, l2))
        h2 -= 1
    if h1 <= h2:
        parts.append(pairs(h1, h2, 0, 0x3FF))
    return alt(*parts)


@functools.lru_cache(maxsize=4096)
def _json_char(c: int) -> tuple:
    return json_chars([(c, c)])


_SHORT_ONLY: Ranges = [(0x08, 0x0A), (0x0C, 0x0D), (0x22, 0x22), (0x5C, 0x5C)]
_RAW_ONLY: Ranges = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]


def key_chars(ranges: Ranges) -> tuple:
    """Any one character of `ranges` in one of the spellings a fixed object key is matched
    in (json_schema.strings._string_literal): printable ASCII as itself, the short escape
    where JSON has one, raw or escaped (\\uXXXX, a surrogate pair) for the others."""
    ranges = normalize(ranges)
    short = [c for c in _SHORT_ESCAPES if c != 0x2F and intersect_ranges(ranges, [(c, c)])]
    parts = [raw_chars(intersect_ranges(ranges, _RAW_ONLY))]
    if short:
        parts.append(cat(lit("\\"), ("b", byte_set(*(ord(_SHORT_ESCAPES[c]) for c in short)))))
    other = negate(_RAW_ONLY + _SHORT_ONLY + [SURROGATES])
    parts.append(json_chars(intersect_ranges(ranges, other)))
    return alt(*[p for p in parts if p != NOTHING])


@functools.lru_cache(maxsize=4096)
def _key_char(c: int) -> tuple:
    return key_chars([(c, c)])


def _case_variants(ranges: Ranges) -> Ranges:
    extra = []
    for lo, hi in ranges:
        for a, b, delta in ((0x41, 0x5A, 32), (0x61, 0x7A, -32)):
            x, y = max(lo, a), min(hi, b)
            if x <= y:
                extra.append((x + delta, y + delta))
    return normalize(list(ranges) + extra)


class _Converter:
    def __init__(self, json_mode: bool, flags: int, key_mode: bool = False):
        self.chars = key_chars if key_mode else json_chars if json_mode else raw_chars
        self.char = _key_char if key_mode else _json_char if json_mode else _raw_char
        self.json_mode = json_mode or key_mode
        self.ignore_case = bool(flags & re.IGNORECASE)
        self.dotall = bool(flags & re.DOTALL)
        # "." stops at line ends: \n in Python, also \r, U+2028 and U+2029 in ECMA-262 (the
        # dialect of JSON Schema patterns, json mode)
        self.line_ends = [(10, 10), (13, 13), (0x2028, 0x2029)] if json_mode else [(10, 10)]
        self.items = 0  # converted so far (the budget is checked every 64)

    def charset(self, ranges: Ranges) -> tuple:
        if self.ignore_case:
            ranges = _case_variants(ranges)
        return self.chars(ranges)

    def category(self, cat_code) -> Ranges:
        table = {
            C.CATEGORY_DIGIT: DIGIT,
            C.CATEGORY_NOT_DIGIT: negate(DIGIT),
            C.CATEGORY_WORD: WORD,
            C.CATEGORY_NOT_WORD: negate(WORD),
            C.CATEGORY_SPACE: SPACE,
            C.CATEGORY_NOT_SPACE: negate(SPACE),
        }
        if cat_code not in table:
            raise GrammarError(f"pattern: unsupported character category {cat_code}")
        return table[cat_code]

    def in_set(self, items) -> Ranges:
        ranges: Ranges = []
        negated = False
        for op, av in items:
            if op is C.NEGATE:
                negated = True
            elif op is C.LITERAL:
                ranges.append((av, av))
            elif op is C.RANGE:
                ranges.append(av)
            elif op is C.CATEGORY:
                ranges.extend(self.category(av))
            else:
                raise GrammarError(f"pattern: unsupported class item {op}")
        if self.ignore_case:
            ranges = _case_variants(ranges)
        ranges = normalize(ranges)
        return negate(ranges) if negated else ranges

    def seq(self, items) -> tuple:
        return cat(*(self.item(op, av) for op, av in items))

    def item(self, op, av) -> tuple:
        self.items += 1
        if not self.items & 63:
            checkpoint()
        if op is C.LITERAL:
            if not self.ignore_case:  # the common case, cached
                return self.char(av)
            return self.charset([(av, av)])
        if op is C.NOT_LITERAL:  # case variants first: (?i)[^a] refuses "A" too
            return self.chars(negate(self.in_set([(C.LITERAL, av)])))
        if op is C.ANY:
            return self.chars(ANY_CHAR if self.dotall else negate(self.line_ends))
        if op is C.IN:
            return self.chars(self.in_set(av))
        if op is C.BRANCH:
            return alt(*(self.seq(branch) for branch in av[1]))
        if op is C.SUBPATTERN:
            _, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                saved = (self.ignore_case, self.dotall)
                self.ignore_case = (self.ignore_case or bool(add_flags & re.I)) and not (
                    del_flags & re.I
                )
                self.dotall = (self.dotall or bool(add_flags & re.S)) and not (del_flags & re.S)
                node = self.seq(sub)
                self.ignore_case, self.dotall = saved
                return node
            return self.seq(sub)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            return rep(self.seq(sub), lo, None if hi is C.MAXREPEAT else hi)
        if op in (C.POSSESSIVE_REPEAT, C.ATOMIC_GROUP):  # they change what matches
            raise GrammarError("pattern: possessive repeats and atomic groups are not supported")
        if op is C.AT:
            raise GrammarError("pattern: anchors (^, $, \\b) are only supported at the ends")
        raise GrammarError(f"pattern: unsupported regex construct {op}")


# what re's parser warns about (a set inside a class, a class's doubled set operator, the
# group a condition names): a pattern with none of these parses without touching the filters
_MAY_WARN = ("[[", "--", "&&", "~~", "||", "(?(")
_QUIET = threading.Lock()


def _parse(pattern: str, flags: int = 0):
    if pattern.count("(") > MAX_GROUP_DEPTH and group_depth(pattern) > MAX_GROUP_DEPTH:
        raise GrammarError(f"pattern: groups nested more than {MAX_GROUP_DEPTH} deep")
    try:
        with watching_calls():  # the parser is Python code without checkpoints
            if not any(pair in pattern for pair in _MAY_WARN):
                return _parser.parse(pattern, flags)
            # its FutureWarnings ("Possible set difference", for "[[" or "--" in a class) say
            # how a future Python may read the class, not how it is read here, and its
            # DeprecationWarnings (a condition's group named by "+1") come before the error the
            # form gets here; catch_warnings swaps the process's filters and puts them back,
            # so one thread at a time
            while not _QUIET.acquire(timeout=0.05):
                checkpoint()
            try:
                with warnings.catch_warnings(action="ignore", category=Warning):
                    return _parser.parse(pattern, flags)
            finally:
                _QUIET.release()
    except (re.error, OverflowError, RecursionError) as exc:
        raise GrammarError(
            f"pattern: invalid regular expression {_shorten(pattern)}: {exc}"
        ) from None


def group_depth(pattern: str) -> int:
    """How deep the groups of `pattern` nest (escapes and character classes left out)."""
    text = _ESCAPE_OR_CLASS.sub("", pattern).encode("utf-8", "surrogatepass")
    data = np.frombuffer(text, np.uint8)
    steps = (data == ord("(")).astype(np.int64) - (data == ord(")"))
    return int(np.cumsum(steps).max(initial=0))


def _shorten(pattern: str, limit: int = 200) -> str:
    return repr(pattern) if len(pattern) <= limit else repr(pattern[:limit]) + "..."


_BEGIN = (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
_END = (C.AT_END, C.AT_END_STRING)


# spellings that mean one thing in Python's re and another in ECMA-262: {,n} is a repeat in
# Python, text in ECMA-262; so are \A and \Z (left to the parser: anchors, refused in json mode)
_DIALECT_REPEAT = re.compile(r"\{,[0-9]*\}")


def _strip_anchors(items: list, json_mode: bool) -> tuple[list, bool, bool]:
    begin, end = (_BEGIN[:1], _END[:1]) if json_mode else (_BEGIN, _END)
    start = stop = False
    while items and items[0][0] is C.AT and items[0][1] in begin:
        items, start = items[1:], True
    while items and items[-1][0] is C.AT and items[-1][1] in end:
        items, stop = items[:-1], True
    return items, start, stop


def _branches(parsed) -> list[list]:
    items = list(parsed)
    if len(items) == 1 and items[0][0] is C.BRANCH:
        return [list(b) for b in items[0][1][1]]
    if (
        len(items) == 1
        and items[0][0] is C.SUBPATTERN
        and not items[0][1][1]
        and not items[0][1][2]
    ):
        inner = list(items[0][1][3])
        if len(inner) == 1 and inner[0][0] is C.BRANCH:
            return [list(b) for b in inner[0][1][1]]
    return [items]


def regex_to_node(
    pattern: str,
    *,
    json_mode: bool = False,
    search: bool = False,
    flags: int = 0,
    key_mode: bool = False,
) -> tuple:
    """Full-match semantics by default; `search=True` is JSON Schema's `pattern`, which matches
    anywhere unless anchored with ^ / $. `key_mode` is json_mode with characters spelled as in
    object keys (key_chars)."""
    json_mode = json_mode or key_mode
    if json_mode and "{," in pattern and _DIALECT_REPEAT.search(_ESCAPE_OR_CLASS.sub("", pattern)):
        raise GrammarError(f"pattern: {{,n}} repeats read differently in ECMA-262 ({pattern!r})")
    parsed = _parse(pattern, flags)
    conv = _Converter(json_mode, parsed.state.flags | flags, key_mode)
    anything = rep(conv.chars(ANY_CHAR), 0, None)
    branches = [_strip_anchors(items, json_mode) for items in _branches(parsed)]
    if json_mode and any(has_assertions(items) for items, _, _ in branches):
        return AnchoredPattern(conv, anything).node(list(parsed), search)
    alternatives = []
    for items, anchored_start, anchored_end in branches:
        node = conv.seq(items)
        if search:
            node = cat(
                EMPTY if anchored_start else anything, node, EMPTY if anchored_end else anything
            )
        alternatives.append(node)
    return alt(*alternatives)


def counted_split(pattern: str) -> tuple[tuple, tuple, int, tuple] | None:
    """A JSON Schema pattern (json mode) that is one branch anchored at both ends holding one
    unbounded repeat of a single character (X*, X+, X{m,}): (the node of what comes before,
    the character's node, m, the node of what comes after); None for any other pattern."""
    regex_to_node(pattern, json_mode=True, search=True)  # the pattern's own checks first
    parsed = _parse(pattern)
    branches = _branches(parsed)
    if len(branches) != 1:
        return None
    items, start, end = _strip_anchors(branches[0], True)
    if not (start and end) or has_assertions(items):
        return None
    repeats = [
        i
        for i, (op, av) in enumerate(items)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[1] is C.MAXREPEAT
    ]
    if len(repeats) != 1:
        return None
    i = repeats[0]
    lo, _, sub = items[i][1]
    sub = list(sub)
    if len(sub) != 1 or sub[0][0] not in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        return None
    conv = _Converter(True, parsed.state.flags)
    return conv.seq(items[:i]), conv.seq(sub), lo, conv.seq(items[i + 1 :])
