"""Number bounds and multipleOf with decimal values: exact against decimal arithmetic (numbers
with bounds or multipleOf are written without an exponent)."""

import json
import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars import GrammarError

_PLAIN = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def _accepts(grammar, text: str) -> bool:
    m = grammar.matcher()
    return m.accept_string(text) and m.is_completed()


CASES = [
    # (schema, valid documents, invalid documents), checked token by token
    ({"type": "number", "minimum": 0.5}, [0.5, 0.51, 1, 100.25], [0.49, 0, -1, "0.5"]),
    ({"type": "number", "exclusiveMaximum": -1.25}, [-1.26, -2, -100.5], [-1.25, -1, 0, 3]),
    ({"type": "number", "minimum": -0.5, "maximum": 0.25}, [-0.5, 0, 0.25, -0.1], [0.26, -0.51]),
    ({"type": "number", "multipleOf": 0.01}, [1, 0.5, 2.75, -3.1, 100], [0.001, 1.005, "1"]),
    ({"type": "number", "multipleOf": 2.5, "minimum": 0}, [0, 2.5, 5, 7.5, 100], [1, 2.4, -5]),
    ({"type": "integer", "multipleOf": 0.5}, [0, 1, -7, 12], [0.5, 1.5]),
    ({"type": "number", "multipleOf": 3}, [0, 3, -9, 300], [1, 1.5, 4]),
]

BIG = 10**50  # 1e50 as a float is 10**50 + 7.6e33, 1e23 is 10**23 - 8.4e6: read as written
LARGE_FLOAT_BOUNDS = [
    ({"type": "integer", "maximum": 1e50}, [BIG, BIG - 1], [BIG + 1]),
    ({"type": "integer", "minimum": 1e23}, [10**23, 10**23 + 1], [10**23 - 1]),
    ({"type": "integer", "exclusiveMinimum": 1e23}, [10**23 + 1], [10**23]),
    ({"type": "integer", "minimum": 10**23, "exclusiveMinimum": 1e23}, [10**23 + 1], [10**23]),
    ({"type": "integer", "maximum": 10**23, "exclusiveMaximum": 1e23}, [10**23 - 1], [10**23]),
    ({"allOf": [{"type": "integer", "minimum": 1e50}, {"minimum": BIG + 1}]}, [BIG + 1], [BIG]),
    ({"allOf": [{"type": "integer", "maximum": 1e50}, {"maximum": BIG + 5}]}, [BIG], [BIG + 1]),
    ({"type": "number", "maximum": 1e50}, [BIG, 1.5], [BIG + 1]),
]


@pytest.mark.parametrize("schema,valid,invalid", CASES + LARGE_FLOAT_BOUNDS)
def test_decimal_keywords(compiler, checker, schema, valid, invalid):
    grammar = compiler.compile_json_schema(schema)
    for doc in valid:
        assert checker.accepts(grammar, json.dumps(doc)), (schema, doc)
    for doc in invalid:
        assert not checker.accepts(grammar, json.dumps(doc)), (schema, doc)


_BOUNDS = st.one_of(
    st.integers(-300, 300), st.integers(-30000, 30000).map(lambda n: n / 100), st.none()
)
_TEXTS = st.builds(
    lambda sign, whole, frac: sign + str(whole) + ("." + frac if frac else ""),
    st.sampled_from(["", "-"]),
    st.integers(0, 400),
    st.text("0123456789", max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(_BOUNDS, st.booleans(), _BOUNDS, st.booleans(), st.lists(_TEXTS, min_size=20))
def test_number_bounds_agree_with_decimal_arithmetic(compiler, lo, lo_ex, hi, hi_ex, texts):
    schema = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_ex else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_ex else "maximum"] = hi
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_ex or hi_ex))):
        with pytest.raises(GrammarError):  # no number at all
            compiler.compile_json_schema(schema)
        return
    grammar = compiler.compile_json_schema(schema)
    for text in texts + [repr(lo), repr(hi), "0", "0.0", "-0.5"]:
        if not _PLAIN.fullmatch(text) or (text.startswith("-") and Decimal(text) == 0):
            continue  # "-0" is not written, a restriction
        v = Decimal(text)
        ok = (lo is None or (v > Decimal(repr(lo)) if lo_ex else v >= Decimal(repr(lo)))) and (
            hi is None or (v < Decimal(repr(hi)) if hi_ex else v <= Decimal(repr(hi)))
        )
        assert _accepts(grammar, text) == ok, (schema, text)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([0.5, 0.01, 0.25, 2.5, 0.1, 1.5, 7, 0.05, 12.5, 0.001, 1e-5]),
    st.lists(_TEXTS, min_size=30),
)
def test_multiple_of_agrees_with_decimal_arithmetic(compiler, k, texts):
    grammar = compiler.compile_json_schema({"type": "number", "multipleOf": k})
    for text in texts:
        ok = Decimal(text) % Decimal(repr(k)) == 0
        assert _accepts(grammar, text) == ok, (k, text)


def test_multiple_of_with_many_significant_digits_raises(compiler):
    with pytest.raises(GrammarError, match="multipleOf"):
        compiler.compile_json_schema({"type": "number", "multipleOf": 0.12345})
    with pytest.raises(GrammarError, match="multipleOf"):
        compiler.compile_json_schema({"type": "number", "multipleOf": -2})


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": 0},
        {"exclusiveMinimum": 0},
        {"maximum": 0},
        {"exclusiveMaximum": 0},
        {"minimum": 0, "maximum": 0},
        {"minimum": 0, "maximum": 5},  # a bound besides zero: no exponents
    ],
)
def test_exponents_where_the_bounds_are_zero(checker, bounds):
    # where the bounds are zero the sign decides, so numbers with an exponent are judged
    # exactly (1e-06 is what json.dumps writes for 0.000001); other bounds refuse them
    import jsonschema

    schema = {"type": "number", **bounds}
    grammar = checker.compiler.compile_json_schema(schema)
    zero_only = set(bounds.values()) == {0}
    for text in ["1e-06", "2.5E+3", "-1e-06", "-2.5e3", "0e5", "0.0E1", "0.001e2", "7", "-7"]:
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        got = checker.accepts(grammar, text)
        assert not got or valid, text
        if zero_only or "e" not in text.lower():
            assert got == valid, text


def test_bounds_that_are_not_finite_merged_by_all_of_raise(compiler):
    """allOf's merge compares bounds as decimals; one that is not finite reaches its keyword's
    check (a GrammarError, not an arithmetic error)."""
    for schema in (
        {"allOf": [{"type": "integer", "minimum": float("nan")}, {"minimum": 1}]},
        {"allOf": [{"type": "number", "maximum": 1}, {"maximum": float("-inf")}]},
    ):
        with pytest.raises(GrammarError, match="finite"):
            compiler.compile_json_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        '{"type": "number", "multipleOf": 1e999}',
        {"type": "number", "multipleOf": float("nan")},
        '{"allOf": [{"multipleOf": 1e999}, {"multipleOf": 2}]}',
        {"allOf": [{"multipleOf": 3}, {"multipleOf": float("nan")}]},
        {"allOf": [{"multipleOf": 3}, {"multipleOf": True}]},
    ],
)
def test_multiple_of_that_is_not_a_finite_positive_number_raises(compiler, schema):
    """multipleOf of an infinity (1e999 in JSON text reads as one), NaN or a boolean, alone or
    merged by allOf: the keyword's own error, not an arithmetic one."""
    with pytest.raises(GrammarError, match="multipleOf must be a positive number"):
        compiler.compile_json_schema(schema)


def test_number_ranges_are_built_once_for_every_schema(compiler, checker):
    """A range is built once per bounds and kept (json_schema.numbers._bounded_range): a later
    schema with the same bounds, other keywords beside, gets the same automaton, and the
    grammars that share it read exactly their own bounds."""
    from grammars.json_schema import numbers

    numbers._bounded_range.cache_clear()
    first = numbers.number_node({"type": "number", "minimum": 0, "maximum": 5}, False, "#")
    again = {"maximum": 5, "title": "t", "minimum": 0, "type": "number"}
    assert numbers.number_node(again, False, "#/x") is first
    assert numbers.number_node(again, True, "#/x") is not first  # integers: another range
    schema = {
        "type": "object",
        "properties": {
            "p": {"type": "number", "minimum": 0, "maximum": 5},
            "q": {"type": "number", "minimum": 0.0, "exclusiveMaximum": 5},
            "r": {"type": "integer", "minimum": 0, "maximum": 5, "multipleOf": 2},
        },
        "required": ["p", "q", "r"],
    }
    for _ in range(2):  # the second compile reads every range from the cache
        grammar = compiler.compile_json_schema(schema)
        assert checker.accepts(grammar, '{"p": 5, "q": 4.99, "r": 4}')
        assert checker.accepts(grammar, '{"p": 0, "q": 0, "r": 0}')
        for bad in ('{"p": 5, "q": 5, "r": 4}', '{"p": 5.01, "q": 1, "r": 4}'):
            assert not checker.accepts(grammar, bad)
        assert not checker.accepts(grammar, '{"p": 1, "q": 1, "r": 3}')
        assert not checker.accepts(grammar, '{"p": 1, "q": -0.5, "r": 2}')
