"""Integers and numbers: literals, minimum/maximum ranges spelled as digit automata, and
multipleOf."""

from __future__ import annotations

import functools
import json
import math

from grammars.automaton import EMPTY, NOTHING, alt, byte_set, cat, intersect, lit, opt, rep
from grammars.errors import GrammarError

_DIGIT = byte_set((0x30, 0x39))
_DIGIT19 = byte_set((0x31, 0x39))


def _number_literal(value) -> tuple:
    return alt(*(lit(text) for text in number_texts(value)))


def number_texts(value) -> list[str]:
    """The ways a number (or boolean) constant is written: an integer with or without ".0",
    other numbers as json.dumps writes them."""
    if isinstance(value, bool):
        return ["true" if value else "false"]
    k = integral_value(value)
    if k is not None:
        return [str(k), f"{k}.0"]
    return [json.dumps(value)]


def integral_value(value: int | float) -> int | None:
    """The integer a number constant is written as (with or without ".0"); None for other
    floats, which are written as json.dumps writes them."""
    if isinstance(value, int) or (
        isinstance(value, float) and value.is_integer() and abs(value) < 1e16
    ):
        return int(value)
    return None


def _same_length(a: str, b: str) -> tuple:
    """Digit strings of one length between a and b (inclusive)."""
    if not a:
        return EMPTY
    if a == "0" * len(a) and b == "9" * len(b):
        return rep(("b", _DIGIT), len(a), len(a))
    if a[0] == b[0]:
        return cat(lit(a[0]), _same_length(a[1:], b[1:]))
    n = len(a) - 1
    parts = [cat(lit(a[0]), _same_length(a[1:], "9" * n))]
    if ord(b[0]) - ord(a[0]) > 1:
        parts.append(cat(("b", byte_set((ord(a[0]) + 1, ord(b[0]) - 1))), rep(("b", _DIGIT), n, n)))
    parts.append(cat(lit(b[0]), _same_length("0" * n, b[1:])))
    return alt(*parts)


def _naturals(lo: int, hi: int | None) -> tuple:
    """Decimal spellings (no leading zeros) of the integers lo..hi, hi None = unbounded."""
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for d in range(len(str(lo)), len(str(top)) + 1):
        a = max(lo, 10 ** (d - 1) if d > 1 else 0)
        b = min(top, 10**d - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if hi is None:
        parts.append(cat(("b", _DIGIT19), rep(("b", _DIGIT), len(str(lo)), None)))
    return alt(*parts)


_FRAC_ANY = opt(cat(lit("."), rep(("b", _DIGIT), 1, None)))
_FRAC_ZERO = opt(cat(lit("."), rep(lit("0"), 1, None)))
_FRAC_NONZERO = cat(
    lit("."), rep(("b", _DIGIT), 0, None), ("b", _DIGIT19), rep(("b", _DIGIT), 0, None)
)
_EXP = opt(
    cat(
        ("b", byte_set(ord("e"), ord("E"))),
        opt(("b", byte_set(ord("+"), ord("-")))),
        rep(("b", _DIGIT), 1, None),
    )
)
_INT = cat(opt(lit("-")), alt(lit("0"), cat(("b", _DIGIT19), rep(("b", _DIGIT), 0, None))))
_NUMBER = cat(_INT, _FRAC_ANY, _EXP)


def _magnitudes(lo, lo_excl: bool, hi, hi_excl: bool, integer: bool) -> tuple:
    """Unsigned decimals m with lo <(=) m <(=) hi; lo >= 0 and both integers; hi may be None."""
    if integer:
        a = lo + 1 if lo_excl else lo
        b = None if hi is None else (hi - 1 if hi_excl else hi)
        return _naturals(a, b)
    parts = [cat(lit(str(lo)), _FRAC_NONZERO if lo_excl else _FRAC_ANY)]
    if hi is None:
        parts.append(cat(_naturals(lo + 1, None), _FRAC_ANY))
    elif hi == lo:
        return cat(lit(str(lo)), _FRAC_ZERO) if not (lo_excl or hi_excl) else NOTHING
    else:
        if hi - 1 >= lo + 1:
            parts.append(cat(_naturals(lo + 1, hi - 1), _FRAC_ANY))
        if not hi_excl:
            parts.append(cat(lit(str(hi)), _FRAC_ZERO))
    return alt(*parts)


def _number_range(lo, lo_excl, hi, hi_excl, integer: bool) -> tuple:
    if lo is None and hi is None:
        return _INT if integer else _NUMBER
    for name, bound in (("minimum", lo), ("maximum", hi)):
        if bound is not None and not float(bound).is_integer():
            if integer:
                continue
            raise GrammarError(f"{name}: non-integer bounds on numbers are not supported")
    if integer:  # tighten fractional bounds to integers
        if lo is not None:
            lo, lo_excl = (math.floor(lo) + 1, False) if lo_excl else (math.ceil(lo), False)
        if hi is not None:
            hi, hi_excl = (math.ceil(hi) - 1, False) if hi_excl else (math.floor(hi), False)
    lo = None if lo is None else int(lo)
    hi = None if hi is None else int(hi)
    parts = []
    # non-negative side: max(lo, 0) .. hi
    if hi is None or hi > 0 or (hi == 0 and not hi_excl):
        if lo is None or lo < 0:
            parts.append(_magnitudes(0, False, hi, hi_excl, integer))
        else:
            parts.append(_magnitudes(lo, lo_excl, hi, hi_excl, integer))
    # negative side: -m with m > 0 and -hi <= m <= -lo
    if lo is None or lo < 0:
        mlo, mlo_excl = (0, True) if hi is None or hi >= 0 else (-hi, hi_excl)
        mhi, mhi_excl = (None, False) if lo is None else (-lo, lo_excl)
        parts.append(cat(lit("-"), _magnitudes(mlo, mlo_excl, mhi, mhi_excl, integer)))
    return alt(*parts)


def _multiple_of_integers(k: int) -> tuple:
    """Integers divisible by k: a k-state remainder automaton over the decimal digits."""
    from grammars.automaton import EagerDFA

    if k > 1000:
        raise GrammarError("multipleOf: divisors above 1000 are not supported")
    # states: 0 start, 1 after "-", 2 after "0" (final), 3 + r remainder r after a nonzero digit
    n = 3 + k
    trans: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    trans[0] = [(1 << ord("-"), 1), (1 << ord("0"), 2)]
    for start in (0, 1):
        for d in range(1, 10):
            trans[start].append((1 << (0x30 + d), 3 + d % k))
    for r in range(k):
        for d in range(10):
            trans[3 + r].append((1 << (0x30 + d), 3 + (r * 10 + d) % k))
    accept = [False, False, True] + [r == 0 for r in range(k)]
    merged = []
    for tr in trans:  # one entry per target
        by_target: dict[int, int] = {}
        for m, t in tr:
            by_target[t] = by_target.get(t, 0) | m
        merged.append([(m, t) for t, m in by_target.items()])
    return ("dfa", EagerDFA(merged, accept, 0).trimmed())


@functools.lru_cache(maxsize=16)  # one automaton per bound, shared by every number node
def digit_runs_at_most(n: int) -> tuple:
    """Number texts in which no run of digits (integer part, fraction, exponent) is longer
    than n: a weak model cannot write digits until its token limit."""
    from grammars.automaton import EagerDFA

    digits = sum(1 << b for b in range(0x30, 0x3A))
    others = sum(1 << ord(c) for c in "-+.eE")
    trans = [[(others, 0)] + ([(digits, i + 1)] if i < n else []) for i in range(n + 1)]
    return ("dfa", EagerDFA(trans, [True] * (n + 1), 0).trimmed())


def bounded_digits(node: tuple, max_digits: int | None, *bounds) -> tuple:
    """`node` with its digit runs limited to max_digits (None: unlimited), never below what
    the schema's own bounds need."""
    if max_digits is None:
        return node
    need = max((len(str(abs(int(b)))) + 1 for b in bounds if b is not None), default=0)
    return intersect(node, digit_runs_at_most(max(max_digits, need)))


def number_node(schema: dict, integer: bool, path: str, max_digits: int | None = None) -> tuple:
    """An integer or number schema's texts; with max_digits, no digit run is longer (an integer
    with both bounds is finite already)."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_excl = hi_excl = False
    emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(emin, bool):
        lo_excl = emin and lo is not None
    elif emin is not None and (lo is None or emin >= lo):
        lo, lo_excl = emin, True
    if isinstance(emax, bool):
        hi_excl = emax and hi is not None
    elif emax is not None and (hi is None or emax <= hi):
        hi, hi_excl = emax, True
    for name, v in (("minimum", lo), ("maximum", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise GrammarError(f"{name} must be a number at {path}")
    node = _number_range(lo, lo_excl, hi, hi_excl, integer)
    if "multipleOf" in schema:
        k = schema["multipleOf"]
        if not (integer and isinstance(k, (int, float)) and float(k).is_integer() and k > 0):
            raise GrammarError(f"multipleOf: only integer divisors of integers ({path})")
        if int(k) != 1:
            node = intersect(node, _multiple_of_integers(int(k)))
    if integer and lo is not None and hi is not None:
        return node
    return bounded_digits(node, max_digits, lo, hi)
