"""Strings: literals, minLength/maxLength, pattern and format."""

from __future__ import annotations

import functools
import json
import re

import numpy as np

from grammars import fastcall
from grammars.array_dfa import ArrayDFA, LazyDFA, compact, packed_masks
from grammars.automaton import MAX_NFA_STATES, NOTHING, byte_set, cat, lit, rep
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.json_schema.core import node_size
from grammars.json_schema.counted import (
    _any_string_dfa,
    _length_dfa,
    _long_chars,
    counted_pattern,
    is_long,
)
from grammars.json_schema.key_trie import key_moves, known_table
from grammars.literal_set import node_words
from grammars.regex import ANY_CHAR, json_chars, key_chars, regex_to_node

_PATTERN_SIZE_HINT = 2000  # a pattern's expression up to this size is not determinised at once
# A character of an object key in the spellings _string_literal writes (printable ASCII as is,
# short escapes where JSON has them, \uXXXX for the other characters of the BMP): a property
# named in the schema must not come back through additionalProperties spelled another way.
_KEY_CHAR = key_chars(ANY_CHAR)
# Calendar dates exactly: years 0001-9999, the days of each month, 29 February in leap years
# (divisible by 4, centuries only when divisible by 400).
_YEAR = "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][48]|[13579][26]|[2468]0)00)"
_DATE = (
    f"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    f"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP_YEAR}-02-29)"
)
# A leap second (:60) exists only at 23:59:60 UTC; it is accepted in that spelling (Z or a
# zero offset): sound, though a leap second written in another offset is refused.
_OFFSET = "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_TIME = (
    f"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?{_OFFSET}"
    f"|23:59:60(\\.[0-9]+)?([Zz]|[+-]00:00))"
)
_IPV4 = r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# IPv6address of RFC 3986 section 3.2.2 (the text form of RFC 4291), alternative by alternative
_H16 = "[0-9A-Fa-f]{1,4}"
_LS32 = f"({_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [f"({_H16}:){{6}}{_LS32}", f"::({_H16}:){{5}}{_LS32}"]
    + [
        f"(({_H16}:){{0,{i}}}{_H16})?::{tail}"
        for i, tail in enumerate(
            [f"({_H16}:){{4}}{_LS32}", f"({_H16}:){{3}}{_LS32}", f"({_H16}:){{2}}{_LS32}"]
            + [f"{_H16}:{_LS32}", _LS32, _H16, ""]
        )
    ]
)
# URI and URI-reference of RFC 3986 (appendix A); IPv4address is a reg-name already
_UNRESERVED_SUB_DELIMS = r"A-Za-z0-9\-._~!$&'()*+,;="
_PCT = "%[0-9A-Fa-f]{2}"
_PCHAR = f"([{_UNRESERVED_SUB_DELIMS}:@]|{_PCT})"
_PATH_ABEMPTY = f"(/{_PCHAR}*)*"
_PATH_ABSOLUTE = f"/({_PCHAR}+{_PATH_ABEMPTY})?"
_QUERY = f"([{_UNRESERVED_SUB_DELIMS}:@/?]|{_PCT})*"  # a fragment has the same characters
# Sound restriction: the host is a reg-name, IP-literals ("[::1]") are refused; with them a URI
# takes ~600 states instead of ~60, copied into every object that holds one.
_REG_NAME = f"([{_UNRESERVED_SUB_DELIMS}]|{_PCT})*"


def _uri_formats() -> dict[str, str]:
    authority = f"(([{_UNRESERVED_SUB_DELIMS}:]|{_PCT})*@)?{_REG_NAME}(:[0-9]*)?"
    tail = rf"(\?{_QUERY})?(#{_QUERY})?"
    uri = (
        f"[A-Za-z][A-Za-z0-9+.\\-]*:"
        f"(//{authority}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PCHAR}+{_PATH_ABEMPTY})?{tail}"
    )
    relative_ref = (
        f"(//{authority}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
        f"|([{_UNRESERVED_SUB_DELIMS}@]|{_PCT})+{_PATH_ABEMPTY})?{tail}"
    )
    return {"uri": uri, "uri-reference": f"{uri}|{relative_ref}"}


# RFC 3339 appendix A: P, then a date part (days, months and days, or years, months and days,
# each from the largest unit given) with an optional time part, a time part alone, or weeks
_DUR_TIME = r"T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
_DURATION = (
    rf"P(([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M([0-9]+D)?)?)({_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"
)

# RFC 6570 (levels 1-4), ASCII only: literals (any printable but space, quotes, \\ ^ ` < > % | and
# braces, or a %XX escape) and expressions: an optional operator, then variables (letters,
# digits, _ and %XX, parts joined by dots), each with a prefix length below 10000 or an explode
_PCT_HEX = "%[0-9A-Fa-f]{2}"
_VARNAME = f"([A-Za-z0-9_]|{_PCT_HEX})(\\.?([A-Za-z0-9_]|{_PCT_HEX}))*"
_VARSPEC = f"{_VARNAME}(:[1-9][0-9]{{0,3}}|\\*)?"
_URI_TEMPLATE = (
    f"([!#$&(-;=?-\\[\\]_a-z~]|{_PCT_HEX}|\\{{[+#./;?&=,!@|]?{_VARSPEC}(,{_VARSPEC})*\\}})*"
)


def _regex_format(depth: int = 2) -> str:
    """A subset of the regular expressions valid both for Python's `re` and ECMA-262 (with or
    without the u flag), groups nested up to `depth`, as JSON text (a backslash written twice,
    a quote as \\", other characters as themselves): literals and escapes of specials,
    \\d \\w \\s and their negations, \\n \\t \\r \\f \\v, \\xHH, \\uHHHH, dot, classes of
    characters, escapes and increasing ranges within digits or one letter case, the
    assertions ^ $ \\b \\B, groups and (?:...) groups, and quantifiers * + ? {n} {n,} {n,m}
    (n <= m, shown by m's digits: one digit each, or n one digit and m 10 to 999), each lazy
    or not. Other valid expressions are refused: a sound restriction."""
    hex_ = "[0-9a-fA-F]"
    bs = r"\\\\"  # one backslash of the value
    quote = r'\\"'
    code = rf"{bs}x{hex_}{{2}}|{bs}u{hex_}{{4}}"
    ranges = "|".join(
        f"{c}-[{c}-{last}]" for first, last in ("09", "az", "AZ") for c in _span(first, last)
    )
    item = rf'{ranges}|{bs}([dDwWsSntrfv\]\[\-^/]|{bs})|{code}|[^\\\]\[\-^"\x00-\x1f]|{quote}'
    atom = (
        rf"\.|{bs}([dDwWsSntrfv^$.|?*+()\[\]{{}}/]|{bs})|{code}|\[\^?({item})+\]"
        rf'|[^\\^$.|?*+()\[\]{{}}"\x00-\x1f]|{quote}'
    )
    pairs = "|".join(f"{n},[{n}-9]" for n in range(10))
    quantifier = rf"([*+?]|\{{([0-9]{{1,3}},?|[0-9],[1-9][0-9]{{1,2}}|{pairs})\}})\??"
    alternation = ""
    for level in range(depth + 1):
        grouped = rf"|\((\?:)?{alternation}\)" if level else ""
        term = rf"\^|\$|{bs}[bB]|({atom}{grouped})({quantifier})?"
        alternation = rf"({term})*(\|({term})*)*"
    return alternation


def _span(first: str, last: str) -> str:
    return "".join(chr(c) for c in range(ord(first), ord(last) + 1))


# Every format is matched with its characters spelled as themselves (none of them needs an
# escape in JSON; refusing the \uXXXX spellings keeps the automata small), except json-pointer,
# whose reference tokens may hold any character.
_FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "json-pointer": r"(/([^~/]|~[01])*)*",
    "relative-json-pointer": r"(0|[1-9][0-9]*)(#|(/([^~/]|~[01])*)*)",
    "duration": _DURATION,
    "uri-template": _URI_TEMPLATE,
    "regex": _regex_format(),
    **_uri_formats(),
}
_JSON_MODE_FORMATS = ("json-pointer", "relative-json-pointer")  # any character, escapes too
# formats whose values include another format's: matched as that one, a sound restriction
# (an IRI or an internationalised address outside ASCII is refused)
_SUBSET_FORMATS = {"iri": "uri", "iri-reference": "uri-reference", "idn-email": "email"}
_DOMAIN_FORMATS = ("hostname", "email")  # counter automata, built by _domain_dfa
# formats whose automata refuse some valid values (the restrictions in docs/grammars.md)
RESTRICTED_FORMATS = (
    *("hostname", "email", "uri", "uri-reference", "time", "date-time"),
    *("iri", "iri-reference", "idn-email", "uri-template", "regex"),
)
# standard formats a validator may check that are not enforced here: they raise GrammarError
_UNENFORCED_FORMATS = {
    "idn-hostname",
}


def _string_literal(text: str) -> tuple:
    """The JSON spelling of a fixed string: printable ASCII as is, what must be escaped in its
    short form (or \\u00XX), other characters raw or as \\uXXXX escapes."""
    _check_length(text)
    if len(text) <= 4096 and _PLAIN_TEXT.fullmatch(text):  # the common case: each byte itself
        return lit(f'"{text}"')
    parts = [lit('"')]
    for i in range(0, len(text), 4096):
        checkpoint()
        parts.extend(map(_char_node, text[i : i + 4096]))
    parts.append(lit('"'))
    return cat(*parts)


def string_word(text: str) -> tuple[int, ...]:
    """_string_literal as a word for grammars.literal_set: printable ASCII characters are their
    byte, every other character the label 256 + its code point (spelled by char_spellings)."""
    _check_length(text)
    if _PLAIN_TEXT.fullmatch(text):
        return (0x22, *text.encode("ascii"), 0x22)
    return (0x22, *(c if _plain(c) else 256 + c for c in map(ord, text)), 0x22)


@functools.lru_cache(maxsize=4096)
def char_spellings(label: int) -> list[tuple[int, ...]]:
    """The ways a JSON string writes the character of a string_word label (byte masks)."""
    return node_words(_char_node(chr(label - 256))) or []


_PLAIN_CHARS = r"\x20-\x21\x23-\x5b\x5d-\x7e"  # printable ASCII that a JSON string holds as is
_PLAIN_TEXT = re.compile(f"[{_PLAIN_CHARS}]*")
_PLAIN_KEYS = re.compile(f'["{_PLAIN_CHARS}]*')  # plain names joined by quotes


def _plain(c: int) -> bool:
    return 0x20 <= c < 0x7F and c != 0x22 and c != 0x5C


@functools.lru_cache(maxsize=4096)
def _char_node(ch: str) -> tuple:
    c = ord(ch)
    if _plain(c):
        return lit(ch)
    if ch in '"\\\b\f\n\r\t':
        return lit(json.dumps(ch)[1:-1])
    return json_chars([(c, c)])


def _check_length(text: str) -> None:
    if len(text) > MAX_NFA_STATES:  # one state per character at least
        raise GrammarError(f"a constant string of {len(text)} characters is too long")


@functools.lru_cache(maxsize=256)
def _pattern_dfa(pattern: str, search: bool):
    from grammars.automaton import EagerDFA

    return compact(EagerDFA.from_node(regex_to_node(pattern, json_mode=True, search=search)))


@functools.lru_cache(maxsize=256)
def _lazy_pattern(pattern: str) -> LazyDFA:
    """The inside of a string matching `pattern` (search semantics), left to the grammar's lazy
    DFA: determinising a pattern eagerly costs most where the lazy DFA meets few of its states
    (alternatives of words, each character with its escaped spellings)."""
    node = regex_to_node(pattern, json_mode=True, search=True)
    size = node_size(node, _PATTERN_SIZE_HINT)
    dfa = LazyDFA(node, size)
    if size > _PATTERN_SIZE_HINT:  # a long expression (a counted repeat): its DFA is smaller
        dfa.determinised()
    return dfa


def _ascii_set(chars: str) -> int:
    return byte_set(*map(ord, chars))


_LET_DIG = byte_set((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A))
_ATEXT = _LET_DIG | _ascii_set("!#$%&'*+-/=?^_`{|}~")


@functools.lru_cache(maxsize=2)
def _domain_dfa(fmt: str):
    """`hostname` (RFC 1123 section 2.1) or `email` (RFC 5321 section 4.1.2: Dot-string "@"
    Domain): labels of letters, digits and hyphens, neither first nor last a hyphen; atoms of
    atext joined by single dots before the '@'.

    Sound restrictions: at most 63 characters in all, which keeps every length limit (labels
    of 63, a local part of 64, a hostname of 253, an address of 254) without counting each one
    (~500 states; counting them exactly takes ~28,000, too many to copy into objects); labels
    with "--" as 3rd and 4th characters (RFC 5890 R-LDH labels: Punycode A-labels, whose
    validity an automaton cannot check, and reserved ones), quoted local parts and address
    literals are refused. States: (part, characters so far, label length up to 4, flag), the
    flag saying the last character was '-' in the domain, '.' in the local part."""
    from grammars.automaton import EagerDFA, StateIndex

    out = EagerDFA()
    states = StateIndex(out, 2_000, f"format {fmt}: automaton too large")

    def state(key):
        part, _, length, flag = key
        return states(key, part == "domain" and length > 0 and not flag)

    def label_steps(n, length, hyphen):
        if length == 0:
            return [(_LET_DIG, ("domain", n + 1, 1, False))]
        longer = min(length + 1, 4)  # the length matters up to the 4th character
        steps = [(_LET_DIG, ("domain", n + 1, longer, False))]
        if not (length == 3 and hyphen):
            steps.append((_ascii_set("-"), ("domain", n + 1, longer, True)))
        if not hyphen:
            steps.append((_ascii_set("."), ("domain", n + 1, 0, False)))
        return steps

    def local_steps(n, after_dot):
        steps = [(_ATEXT, ("local", n + 1, 0, False))]
        if n > 0 and not after_dot:
            steps.append((_ascii_set("."), ("local", n + 1, 0, True)))
            steps.append((_ascii_set("@"), ("domain", n + 1, 0, False)))
        return steps

    out.start = state(("local" if fmt == "email" else "domain", 0, 0, False))
    while states.todo:
        checkpoint()
        key = states.todo.pop()
        part, n, length, flag = key
        steps = label_steps(n, length, flag) if part == "domain" else local_steps(n, flag)
        trans = out.trans[states.index[key]]
        for mask, target in steps:
            if target[1] <= 63:
                trans.append((mask, state(target)))
    return out.trimmed()


@functools.lru_cache(maxsize=32)
def _format_dfa(fmt: str):
    """The inside of a string of format `fmt`."""
    from grammars.automaton import EagerDFA

    if fmt in _DOMAIN_FORMATS:
        return compact(_domain_dfa(fmt))
    node = regex_to_node(_FORMATS[fmt], json_mode=fmt in _JSON_MODE_FORMATS)
    return compact(EagerDFA.from_node(node))


def key_node() -> tuple:
    """Any object key, each character spelled as _string_literal spells it (_KEY_CHAR)."""
    return ("dfa", _key_dfa()[0])


@functools.lru_cache(maxsize=1)
def _key_dfa():
    """key_node() determinised, and its state inside a key between characters."""
    from grammars.automaton import EagerDFA

    dfa = EagerDFA.from_node(cat(lit('"'), rep(_KEY_CHAR, 0, None), lit('"')))
    inside = next(t for m, t in dfa.trans[dfa.start] if m >> 0x22 & 1)
    return dfa, inside


class _KeyParts:
    """What every key_except DFA shares, as key_trie.key_moves reads it (`arrays`): key_node()'s
    moves, the moves inside a key split into those on printable ASCII (which a trie node
    narrows: less its children's bytes and the quote) and the others (which every trie node
    keeps), and the moves of a trie node with no child or one, by its byte; masks numbered in
    one list, `masks` (`index`: their numbers), packed as the NFA reads them (`packed`) and in
    two words where they fit in 128 bits (pending masks are compared with them)."""

    def __init__(self):
        base, inside = _key_dfa()
        src, ids, tgt, masks, _ = compact(base).moves()
        self.masks = list(masks)
        self.index = {m: i for i, m in enumerate(self.masks)}
        self.accept = list(base.accept)
        self.accepting = np.flatnonzero(self.accept).astype(np.int64)  # every DFA's, as its own
        quote = 1 << 0x22
        printable = byte_set((0x20, 0x7E))
        moves = base.trans[inside]
        self.close = next(t for m, t in moves if m & quote)
        self.quote = self.number(quote)
        narrowed = [(m & printable & ~quote, t) for m, t in moves if m & printable & ~quote]
        shared = [(self.number(m & ~printable), t) for m, t in moves if m & ~printable]
        byte = [self.number(1 << b) for b in range(128)]
        leaf = self._narrowing(narrowed, 0)
        one = [self._narrowing(narrowed, 1 << b) for b in range(128)]  # one child, by its byte
        self.packed = packed_masks(self.masks)  # (numbering stops here)
        # a one-child node's moves: the byte's first, then the narrowed ones (their targets
        # after the child's); rows padded, their lengths apart
        width = 1 + max(len(i) for i, _ in one)
        one_ids = np.zeros((128, width), np.int64)
        one_tgt = np.zeros((128, width), np.int64)
        for b, (i, t) in enumerate(one):
            one_ids[b, : 1 + len(i)] = [byte[b], *i]
            one_tgt[b, : len(t)] = t
        low = (1 << 64) - 1  # the masks in two words (0, 0: wider, never a pending mask)
        known_lo = np.array([m & low if m >> 128 == 0 else 0 for m in self.masks], np.uint64)
        known_hi = np.array([m >> 64 if m >> 128 == 0 else 0 for m in self.masks], np.uint64)
        self.arrays = (
            (
                *(np.asarray(x, np.int64) for x in (src, ids, tgt)),
                np.array(byte, np.int64),
                one_ids,
                one_tgt,
                np.array([1 + len(i) for i, _ in one], np.int64),
            ),
            (
                np.array(leaf[0], np.int64),
                np.array(leaf[1], np.int64),
                np.array([m & low for m, _ in narrowed], np.uint64),  # masks in two words
                np.array([m >> 64 for m, _ in narrowed], np.uint64),
                np.array([t for _, t in narrowed], np.int64),
                np.array([i for i, _ in shared], np.int64),
                np.array([t for _, t in shared], np.int64),
            ),
            (  # the masks packed, and their numbers by their two words (known_table)
                self.packed,
                *known_table(known_lo, known_hi),
            ),
        )

    def number(self, m: int) -> int:
        i = self.index.get(m)
        if i is None:
            i = self.index[m] = len(self.masks)
            self.masks.append(m)
        return i

    def _narrowing(self, narrowed, taken: int) -> tuple[list[int], list[int]]:
        """The moves of `narrowed` less the bytes of `taken`: mask numbers, targets."""
        moves = [(self.number(m & ~taken), t) for m, t in narrowed if m & ~taken]
        return [i for i, _ in moves], [t for _, t in moves]


@functools.lru_cache(maxsize=1)
def _key_parts() -> _KeyParts:
    return _KeyParts()


@functools.lru_cache(maxsize=1024)
def key_except(names: tuple[str, ...]):
    """The DFA (an ArrayDFA) of the keys key_node() accepts except `names` (as
    _string_literal spells them), built straight from a trie of the names; None unless every
    name is printable ASCII (each of whose characters key_node() reads as one byte that leads
    back inside the key). States: key_node()'s, then one per trie node (root first), then the
    start, which reads the opening quote into the root."""
    text = '"'.join(names)  # the quote, which no plain name holds, between the names
    if not _PLAIN_KEYS.fullmatch(text) or text.count('"') != max(len(names) - 1, 0):
        return None
    parts = _key_parts()
    n = len(parts.accept)
    moves, packed = fastcall.call(
        key_moves,
        np.frombuffer(text.encode("ascii"), np.uint8),
        len(names),
        parts.arrays,
        n,
        parts.quote,
        parts.close,
    )
    start = int(moves[0, -1])  # the start state reads the opening quote, the last move
    accept = parts.accept + [False] * (start + 1 - n)  # only key_node()'s own states accept
    return ArrayDFA.from_table(moves, packed, accept, parts.accepting, start)


def string_node(schema: dict, path: str = "#", rules: dict | None = None) -> tuple:
    """A string value of `schema`; with `rules` (the grammar's rules, which it may add to),
    long lengths are counted in blocks (_long_chars), otherwise up to _MAX_UNROLLED."""
    lo = schema.get("minLength", 0)
    hi = schema.get("maxLength")
    if isinstance(lo, float) and lo.is_integer():
        lo = int(lo)
    if isinstance(hi, float) and hi.is_integer():
        hi = int(hi)
    if type(lo) is not int or lo < 0 or (hi is not None and (type(hi) is not int or hi < 0)):
        raise GrammarError(f"minLength/maxLength must be non-negative integers at {path}")
    if hi is not None and hi < lo:
        return NOTHING
    patterns = tuple(schema.get("__patterns", ()))  # more patterns, left by merging allOf
    if schema.get("pattern") is not None:
        patterns = (schema["pattern"], *patterns)
    if not all(type(p) is str for p in patterns):
        raise GrammarError(f"pattern must be a string at {path}")
    fmt = schema.get("format")
    if fmt is not None and type(fmt) is not str:
        raise GrammarError(f"format must be a string at {path}")
    if isinstance(fmt, str) and fmt in _UNENFORCED_FORMATS:
        raise GrammarError(f"format: {fmt!r} is not supported ({path})")
    fmt = _SUBSET_FORMATS.get(fmt, fmt) if isinstance(fmt, str) else fmt
    if not isinstance(fmt, str) or (fmt not in _FORMATS and fmt not in _DOMAIN_FORMATS):
        fmt = None  # an unknown format is an annotation
    if not patterns and fmt is None:
        if lo == 0 and hi is None:
            return ("dfa", _any_string_dfa())
        if rules is not None and is_long(lo, hi):
            return cat(lit('"'), _long_chars(lo, hi, rules), lit('"'))
        return cat(lit('"'), ("dfa", _length_dfa(lo, hi)), lit('"'))
    if len(patterns) == 1 and fmt is None and lo == 0 and hi is None:
        return cat(lit('"'), ("dfa", _lazy_pattern(patterns[0])), lit('"'))
    body = _string_body(patterns, fmt, lo, hi)
    if body is None and rules is not None and fmt is None:
        inside = counted_pattern(patterns, lo, hi, rules)
        if inside is not None:
            return cat(lit('"'), inside, lit('"'))
    if body is None:
        raise GrammarError(
            f"maxLength: {hi} combined with pattern/format is too large to enforce ({path})"
        )
    return cat(lit('"'), ("dfa", body), lit('"'))


@functools.lru_cache(maxsize=256)
def _string_body(patterns: tuple, fmt: str | None, lo: int, hi: int | None):
    """The inside of a string matching every one of `patterns` (search semantics) and
    `format`, of lo..hi characters; None when maxLength is too large to enforce beside them."""
    pattern_dfa = None
    for pattern in patterns:
        dfa = _pattern_dfa(pattern, True)
        pattern_dfa = dfa if pattern_dfa is None else pattern_dfa.product(dfa, "and", limit=20_000)
    format_dfa = _format_dfa(fmt) if fmt is not None else None
    length_dfa = None
    if lo > 0 or hi is not None:
        # a character takes 1 to 12 bytes in a JSON string (a surrogate pair escape), one byte
        # in a format other than json-pointer (spelled as itself)
        parts = [(pattern_dfa, 12), (format_dfa, 12 if fmt == "json-pointer" else 1)]
        lengths = [(d.path_lengths(), per_char) for d, per_char in parts if d is not None]
        long_enough = any(shortest >= per_char * lo for (shortest, _), per_char in lengths)
        short_enough = hi is None or any(x is not None and x <= hi for (_, x), _ in lengths)
        redundant = long_enough and short_enough
        if not redundant:
            if hi is not None and hi > 512:
                return None
            length_dfa = _length_dfa(lo, hi)
    # a URI beside a 512-character counter takes ~36,000 states
    limit = 20_000 if fmt is None else 60_000
    body = None
    for dfa in (format_dfa, length_dfa, pattern_dfa):
        if dfa is not None:
            body = dfa if body is None else body.product(dfa, "and", limit=limit)
    return compact(body)
