"""Integers and numbers: literals, minimum/maximum ranges spelled as digit automata, and
multipleOf."""

from __future__ import annotations

import functools
import json
import math
from decimal import Decimal

from grammars.automaton import EMPTY, NOTHING, alt, byte_set, cat, intersect, lit, opt, rep
from grammars.errors import GrammarError
from grammars.json_schema.core import positive_number

_DIGIT = byte_set((0x30, 0x39))
_DIGIT19 = byte_set((0x31, 0x39))


def _number_literal(value, integers_only: bool = False) -> tuple:
    return alt(*(lit(text) for text in number_texts(value, integers_only)))


def number_texts(value, integers_only: bool = False) -> list[str]:
    """The ways a number (or boolean) constant is written: an integer with or without ".0",
    other numbers as json.dumps writes them and without an exponent. `integers_only`: an
    integral value only as digits (drafts 3 and 4 count 2.0 and 1e20 as no integer)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise GrammarError(f"{value} is not a JSON number")
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if integers_only and (isinstance(value, int) or value.is_integer()):
        return [str(int(value))]
    k = integral_value(value)
    if k is not None:
        return [str(k), f"{k}.0"]
    plain = format(_decimal(value), "f")  # 1e-07 also as 0.0000001, 1e+16 as 10000000000000000
    return list(dict.fromkeys([json.dumps(value), plain]))


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
_EXPONENT = cat(
    ("b", byte_set(ord("e"), ord("E"))),
    opt(("b", byte_set(ord("+"), ord("-")))),
    rep(("b", _DIGIT), 1, None),
)
_EXP = opt(_EXPONENT)
_INT = cat(opt(lit("-")), alt(lit("0"), cat(("b", _DIGIT19), rep(("b", _DIGIT), 0, None))))
_NUMBER = cat(_INT, _FRAC_ANY, _EXP)
_DIGITS = rep(("b", _DIGIT), 0, None)
_MAGNITUDE = cat(alt(lit("0"), cat(("b", _DIGIT19), _DIGITS)), _FRAC_ANY)  # no sign or exponent
_ZERO_MANTISSA = cat(lit("0"), _FRAC_ZERO)
_NONZERO_MANTISSA = alt(cat(("b", _DIGIT19), _DIGITS, _FRAC_ANY), cat(lit("0"), _FRAC_NONZERO))
# the numbers that are not integers, in their canonical spelling (negation.canonical_texts: no
# exponent, a fraction ending in 1-9), for `not: {"type": "integer"}` beside numbers
FRACTIONAL = cat(_INT, lit("."), _DIGITS, ("b", _DIGIT19))


def _number_range(lo, lo_excl, hi, hi_excl, integer: bool) -> tuple:
    if lo is None and hi is None:
        return _INT if integer else _NUMBER
    if integer:
        return _integer_range(lo, lo_excl, hi, hi_excl)
    return _decimal_range(lo, lo_excl, hi, hi_excl)


def _integer_range(lo, lo_excl: bool, hi, hi_excl: bool) -> tuple:
    """Integers between the bounds (fractional ones are tightened, each read as the decimal it
    is written as: 1e23 is 10**23, not the float's 99999999999999991611392), written without a
    fraction."""
    if lo is not None:
        lo = math.floor(_decimal(lo)) + 1 if lo_excl else math.ceil(_decimal(lo))
    if hi is not None:
        hi = math.ceil(_decimal(hi)) - 1 if hi_excl else math.floor(_decimal(hi))
    parts = []
    if hi is None or hi >= 0:  # non-negative side: max(lo, 0) .. hi
        parts.append(_naturals(max(lo or 0, 0), hi))
    if lo is None or lo < 0:  # negative side: -m with max(-hi, 1) <= m <= -lo
        smallest = 1 if hi is None else max(1, -hi)
        parts.append(cat(lit("-"), _naturals(smallest, None if lo is None else -lo)))
    return alt(*parts)


def _decimal(bound) -> Decimal:
    """A bound as the decimal it is written as (a float as its shortest repr: 0.1 is 1/10)."""
    return Decimal(repr(bound)) if isinstance(bound, float) else Decimal(bound)


def _decimal_range(lo, lo_excl: bool, hi, hi_excl: bool) -> tuple:
    """Numbers between two decimal bounds, written without an exponent, except where the
    bounds are zero (then the sign alone decides); "-0" is not written."""
    lo = None if lo is None else _decimal(lo)
    hi = None if hi is None else _decimal(hi)
    plain = _plain_decimal_range(lo, lo_excl, hi, hi_excl)
    if lo not in (None, 0) or hi not in (None, 0):
        return plain
    # m e k: its sign is the mantissa's (a zero mantissa is zero)
    signed = []
    if hi is None or (hi == 0 and not hi_excl):  # zero and the positive side are below hi
        if lo is None or (lo == 0 and not lo_excl):
            signed.append(_ZERO_MANTISSA)
        if hi is None:
            signed.append(_NONZERO_MANTISSA)
    if lo is None:  # the negative side
        signed.append(cat(lit("-"), _NONZERO_MANTISSA))
    return alt(plain, cat(alt(*signed), _EXPONENT))


def _plain_decimal_range(lo, lo_excl: bool, hi, hi_excl: bool) -> tuple:
    # a value m >= 0 is written m, a value -m (m > 0) "-" m
    positive = [_compared(">", lo, lo_excl), _compared("<", hi, hi_excl)]
    negative = [
        _compared(">", Decimal(0), True),
        _compared(">", None if hi is None else -hi, hi_excl),
        _compared("<", None if lo is None else -lo, lo_excl),
    ]
    return alt(_all_of(positive), cat(lit("-"), _all_of(negative)))


def _all_of(nodes: list) -> tuple:
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        return _MAGNITUDE
    out = nodes[0]
    for n in nodes[1:]:
        out = intersect(out, n)
    return out


def _compared(side: str, q: Decimal | None, exclusive: bool) -> tuple | None:
    """Unsigned decimals m (no exponent) with m >(=) q for side ">", m <(=) q for "<"; None
    when every m qualifies."""
    if q is None or (side == ">" and (q < 0 or (q == 0 and not exclusive))):
        return None
    if q < 0:
        return NOTHING
    whole, _, fraction = format(q, "f").partition(".")
    whole, fraction = int(whole), fraction.rstrip("0")
    if side == ">":
        beyond = cat(_naturals(whole + 1, None), _FRAC_ANY)
        tail = _fraction_above(fraction, exclusive)
    else:
        beyond = cat(_naturals(0, whole - 1), _FRAC_ANY) if whole > 0 else NOTHING
        tail = _fraction_below(fraction, exclusive)
    return alt(beyond, cat(lit(str(whole)), tail))


def _digits_between(lo: int, hi: int) -> tuple:
    return ("b", byte_set((0x30 + lo, 0x30 + hi))) if lo <= hi else NOTHING


def _fraction_above(f: str, exclusive: bool) -> tuple:
    """Fractions (".d...", or none) of value above 0.f, or equal unless exclusive; f has no
    trailing zeros."""
    if not f:
        return _FRAC_NONZERO if exclusive else _FRAC_ANY

    # built from the last digit on (a function calling itself from inside made a reference
    # cycle at each call, left to the cyclic collector): digits d... with 0.d... above (or
    # equal to) 0.f[i:]
    rest = cat(_DIGITS, ("b", _DIGIT19), _DIGITS) if exclusive else _DIGITS
    for c in reversed(f):
        d = int(c)
        rest = alt(cat(_digits_between(d + 1, 9), _DIGITS), cat(lit(c), rest))
    return cat(lit("."), rest)


def _fraction_below(f: str, exclusive: bool) -> tuple:
    """Fractions (".d...", or none) of value below 0.f, or equal unless exclusive; f has no
    trailing zeros."""
    if not f:
        return NOTHING if exclusive else _FRAC_ZERO

    # (from the last digit on, as in _fraction_above): one or more digits d... with 0.d...
    # below (or equal to) 0.f[i:]; stopping early is below, as f[i + 1:] is not all zeros
    rest = None
    for c in reversed(f):
        after = (NOTHING if exclusive else rep(lit("0"), 0, None)) if rest is None else opt(rest)
        rest = alt(cat(_digits_between(0, int(c) - 1), _DIGITS), cat(lit(c), after))
    return opt(cat(lit("."), rest))


@functools.lru_cache(maxsize=64)
def _multiples(a: int, d: int) -> tuple:
    """Numbers x (no exponent) that are multiples of a / 10**d: x * 10**d is an integer (no
    nonzero digit after the d-th decimal) divisible by a; remainder states over the digits."""
    from grammars.automaton import EagerDFA, StateIndex

    out = EagerDFA()
    states = StateIndex(out, 1 << 30, "")  # a <= 1000 and d <= 100 keep it small
    pad = [pow(10, d - k, a) for k in range(d + 1)]  # x * 10**d from the digits so far

    def state(key):
        kind, r, k = key
        return states(key, kind in ("int", "zero", "frac") and r * pad[k] % a == 0)

    def digit(c: int) -> int:
        return 1 << (0x30 + c)

    out.start = state(("start", 0, 0))
    while states.todo:
        key = states.todo.pop()
        kind, r, k = key
        trans = out.trans[states.index[key]]
        steps = []
        if kind in ("start", "sign"):
            steps.append((digit(0), ("zero", 0, 0)))
            steps += [(digit(c), ("int", c % a, 0)) for c in range(1, 10)]
            if kind == "start":
                steps.append((1 << ord("-"), ("sign", 0, 0)))
        elif kind == "int":
            steps += [(digit(c), ("int", (r * 10 + c) % a, 0)) for c in range(10)]
        if kind in ("int", "zero"):
            steps.append((1 << ord("."), ("dot", r, 0)))
        if kind in ("dot", "frac"):
            if k < d:
                steps += [(digit(c), ("frac", (r * 10 + c) % a, k + 1)) for c in range(10)]
            else:
                steps.append((digit(0), ("frac", r, k)))
        by_target: dict[int, int] = {}
        for mask, target in steps:
            t = state(target)
            by_target[t] = by_target.get(t, 0) | mask
        trans.extend((mask, t) for t, mask in by_target.items())
    return ("dfa", out.trimmed())


def _multiple_of(k, path: str) -> tuple:
    """The numbers that are multiples of `k` (a positive number, a float read as its repr)."""
    positive_number(k, f"multipleOf must be a positive number at {path}")
    _, digits, exp = _decimal(k).normalize().as_tuple()
    a = int("".join(map(str, digits))) * 10 ** max(exp, 0)
    d = max(-exp, 0)
    if a > 1000 or d > 100:
        raise GrammarError(f"multipleOf: {k} has more than 3 significant digits ({path})")
    return _multiples(a, d)


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
    runs = (format(abs(_decimal(b)), "f").split(".") for b in bounds if b is not None)
    need = max((len(run) + 1 for parts in runs for run in parts), default=0)
    return intersect(node, digit_runs_at_most(max(max_digits, need)))


def number_node(schema: dict, integer: bool, path: str, max_digits: int | None = None) -> tuple:
    """An integer or number schema's texts; with max_digits, no digit run is longer (an integer
    with both bounds is finite already)."""
    for name in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = schema.get(name)
        if v is None or (isinstance(v, bool) and name.startswith("exclusive")):  # draft 4 flags
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GrammarError(f"{name} must be a number at {path}")
        if not math.isfinite(v):
            raise GrammarError(f"{name} must be a finite number at {path}")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_excl = hi_excl = False
    emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    # the stricter bound of each side, compared as decimals (1e23 and 10**23 are equal)
    if isinstance(emin, bool):
        lo_excl = emin and lo is not None
    elif emin is not None and (lo is None or _decimal(emin) >= _decimal(lo)):
        lo, lo_excl = emin, True
    if isinstance(emax, bool):
        hi_excl = emax and hi is not None
    elif emax is not None and (hi is None or _decimal(emax) <= _decimal(hi)):
        hi, hi_excl = emax, True
    node = _bounded_range(lo, lo_excl, hi, hi_excl, integer, max_digits)
    if "multipleOf" in schema and not (integer and schema["multipleOf"] == 1):
        node = intersect(node, _multiple_of(schema["multipleOf"], path))
    return node


@functools.lru_cache(maxsize=256)  # bounds recur across schemas: minimum 0, 1 to 65535, ...
def _bounded_range(lo, lo_excl: bool, hi, hi_excl: bool, integer: bool, max_digits) -> tuple:
    """The numbers between two bounds (None: none), digit runs limited to max_digits unless
    an integer has both bounds (it is finite already). Bounds equal as Python numbers (1 and
    1.0, 1e22 and 10**22) share an entry: they are the same decimal, so the same range."""
    node = _number_range(lo, lo_excl, hi, hi_excl, integer)
    if integer and lo is not None and hi is not None:
        return node
    return bounded_digits(node, max_digits, lo, hi)
