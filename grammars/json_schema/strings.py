"""Strings: literals, minLength/maxLength, pattern and format."""

from __future__ import annotations

import functools
import json
import re

from grammars.automaton import MAX_NFA_STATES, NOTHING, cat, lit, rep
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.literal_set import node_words
from grammars.regex import ANY_CHAR, json_chars, regex_to_node

_STRING_CHAR = json_chars(ANY_CHAR)
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
_FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "email": r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|\\^`]*",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    "uri-reference": r"[^\s<>\"{}|\\^`]*",
    "json-pointer": r"(/([^~/]|~[01])*)*",
    "hostname": r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
}
# standard formats a validator may check that are not enforced here: they raise GrammarError
_UNENFORCED_FORMATS = {
    "regex",
    "uri-template",
    "idn-email",
    "idn-hostname",
    "iri",
    "iri-reference",
    "relative-json-pointer",
    "duration",
}
_H = "[0-9a-fA-F]{1,4}"
_V4 = _FORMATS["ipv4"]
_FORMATS["ipv6"] = "|".join(
    [
        f"({_H}:){{7}}{_H}",
        f"({_H}:){{1,7}}:",
        f"({_H}:){{1,6}}:{_H}",
        f"({_H}:){{1,5}}(:{_H}){{1,2}}",
        f"({_H}:){{1,4}}(:{_H}){{1,3}}",
        f"({_H}:){{1,3}}(:{_H}){{1,4}}",
        f"({_H}:){{1,2}}(:{_H}){{1,5}}",
        f"{_H}:(:{_H}){{1,6}}",
        f":((:{_H}){{1,7}}|:)",
        f"({_H}:){{6}}{_V4}",
        f"::({_H}:){{0,5}}{_V4}",
        f"({_H}:){{1,5}}:{_V4}",
    ]
)


def _string_literal(text: str) -> tuple:
    """The JSON spelling of a fixed string: printable ASCII as is, what must be escaped in its
    short form (or \\u00XX), other characters raw or as \\uXXXX escapes."""
    _check_length(text)
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


_PLAIN_TEXT = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]*")


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

    return EagerDFA.from_node(regex_to_node(pattern, json_mode=True, search=search))


@functools.lru_cache(maxsize=256)
def _length_dfa(lo: int, hi: int | None):
    """Strings of lo..hi characters (JSON spelling), built directly as a counter automaton."""
    from grammars.automaton import EagerDFA, StateIndex

    if lo > 10_000 or (hi is not None and hi > 10_000):
        raise GrammarError("minLength/maxLength: lengths above 10000 are not supported")
    char = _char_dfa()
    top = hi if hi is not None else lo
    out = EagerDFA()
    states = StateIndex(out, 1 << 30, "")  # size bounded by the 10000 limit above

    def state(i, c):
        return states((i, c), c == char.start and lo <= i and (hi is None or i <= hi))

    out.start = state(0, char.start)
    while states.todo:
        checkpoint()
        i, c = states.todo.pop()
        trans = out.trans[states.index[(i, c)]]
        for cm, t in char.trans[c]:
            if char.accept[t]:
                j = i + 1 if i < top else (top if hi is None else None)
                if j is None:
                    continue
                trans.append((cm, state(j, char.start)))
            else:
                trans.append((cm, state(i, t)))
    return out.trimmed()


@functools.lru_cache(maxsize=1)
def _char_dfa():
    from grammars.automaton import EagerDFA

    dfa = EagerDFA.from_node(_STRING_CHAR)
    assert not any(dfa.trans[s] for s in range(len(dfa.trans)) if dfa.accept[s])
    return dfa


def string_node(schema: dict, path: str = "#") -> tuple:
    lo = schema.get("minLength", 0)
    hi = schema.get("maxLength")
    if isinstance(lo, float) and lo.is_integer():
        lo = int(lo)
    if isinstance(hi, float) and hi.is_integer():
        hi = int(hi)
    if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
        raise GrammarError(f"minLength/maxLength must be integers at {path}")
    if hi is not None and hi < lo:
        return NOTHING
    patterns = []
    if "pattern" in schema:
        patterns.append((schema["pattern"], True))
    fmt = schema.get("format")
    if fmt in _FORMATS:
        patterns.append((_FORMATS[fmt], False))
    elif fmt in _UNENFORCED_FORMATS:
        raise GrammarError(f"format: {fmt!r} is not supported ({path})")
    if not patterns:
        if lo == 0 and hi is None:
            return cat(lit('"'), rep(_STRING_CHAR, 0, None), lit('"'))
        return cat(lit('"'), ("dfa", _length_dfa(lo, hi)), lit('"'))
    body = _string_body(tuple(patterns), lo, hi)
    if body is None:
        raise GrammarError(
            f"maxLength: {hi} combined with pattern/format is too large to enforce ({path})"
        )
    return cat(lit('"'), ("dfa", body), lit('"'))


@functools.lru_cache(maxsize=256)
def _string_body(patterns: tuple[tuple[str, bool], ...], lo: int, hi: int | None):
    """The inside of a string matching every (pattern, search) of `patterns`, of lo..hi
    characters; None when maxLength is too large to enforce beside them."""
    body = None
    for pattern, search in patterns:
        dfa = _pattern_dfa(pattern, search)
        body = dfa if body is None else body.product(dfa, "and")
    if lo > 0 or hi is not None:
        shortest, longest = body.path_lengths()
        # a character takes 1 to 12 bytes in a JSON string (a surrogate pair escape)
        redundant = shortest >= 12 * lo and longest is not None and (hi is None or longest <= hi)
        if not redundant:
            if hi is not None and hi > 512:
                return None
            body = body.product(_length_dfa(lo, hi), "and")
    return body
