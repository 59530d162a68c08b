"""`not` rewritten into positive schemas and `if`/`then`/`else`: exact, token by token."""

import pytest

from grammars import GrammarError

KIND = {"properties": {"kind": {"const": "num"}}, "required": ["kind"]}

CASES = [
    # (feature, schema, valid documents, invalid documents)
    (
        "not required: the property is absent, and only objects pass",
        {"not": {"required": ["x"]}},
        [{}, {"a": 1}],
        [{"x": 1}, {"a": 1, "x": None}, 1, "s", None, []],
    ),
    (
        "not required of two: one of them is absent",
        {"type": "object", "not": {"required": ["x", "y"]}},
        [{}, {"x": 1}, {"y": 2, "z": 3}],
        [{"x": 1, "y": 2}, {"y": 2, "x": 1}],
    ),
    (
        "not anyOf (De Morgan): mutually exclusive properties",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "not": {"anyOf": [{"required": ["a", "b"]}, {"required": ["c"]}]},
        },
        [{"a": 1}, {"b": 2}, {}, {"d": 1}],
        [{"a": 1, "b": 2}, {"c": 1}, {"a": 1, "c": 0}],
    ),
    (
        "not const with no type: every other value",
        {"not": {"enum": ["a", None, True]}},
        ["b", "", 1, 2.5, False, [], {"a": 1}, ["a"]],
        ["a", None, True],
    ),
    (
        "double negation",
        {"allOf": [{"enum": [1.0, 2]}, {"not": {"not": {"enum": [1]}}}]},
        [1, 1.0],
        [2, 3],
    ),
    (
        "not of an object shape with a property schema",
        {"type": "object", "not": {"properties": {"k": {"const": "x"}}, "required": ["k"]}},
        [{}, {"k": "y"}, {"k": 1, "z": 2}],
        [{"k": "x"}, {"k": "x", "z": 2}],
    ),
    (
        "if/then/else",
        {
            "type": "object",
            "properties": {"kind": {"type": "string"}, "n": {}},
            "if": KIND,
            "then": {"properties": {"n": {"type": "integer"}}},
            "else": {"properties": {"n": {"type": "string"}}},
        },
        [{"kind": "num", "n": 1}, {"kind": "str", "n": "x"}, {"n": "x"}, {"kind": "num"}],
        [{"kind": "num", "n": "x"}, {"kind": "str", "n": 1}, {"n": 1}, {"kind": 3}],
    ),
    (
        "if/then without else",
        {"if": {"type": "string"}, "then": {"minLength": 2}},
        ["ab", 1, None, {"a": 1}],
        ["a", ""],
    ),
    ("if alone asserts nothing", {"type": "integer", "if": {"minimum": 3}}, [1, 5], ["x"]),
    (
        "numbers that are not integers, in their canonical spelling",
        {"type": ["number", "string"], "minimum": 1, "maximum": 3, "not": {"type": "integer"}},
        [1.5, 2.25, 1.001, "x"],
        [1, 2, 3, 0.5, 3.5, None],
    ),
]


@pytest.mark.parametrize("feature,schema,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_negation(checker, feature, schema, valid, invalid):
    checker.check_schema(feature, schema, valid, invalid)


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "object", "minProperties": 1}},
        {"not": {"enum": [1, "a"]}},  # "1.00" is 1 too: numbers are not listed literally
        {"type": "object", "if": {"maxProperties": 2}, "then": {"required": ["a"]}},
    ],
)
def test_negations_without_an_exact_rewrite_raise(compiler, schema):
    with pytest.raises(GrammarError, match="not"):
        compiler.compile_json_schema(schema)


def test_difference_never_lets_another_spelling_of_a_negated_value_through(compiler, checker):
    strings = compiler.compile_json_schema({"type": "string", "not": {"enum": ["a", "/"]}})
    assert checker.accepts(strings, '"b"')
    for text in ['"a"', '"\\u0061"', '"\\/"', '"/"']:
        assert not checker.accepts(strings, text), text
    numbers = compiler.compile_json_schema({"type": "number", "not": {"enum": [1, 2.5]}})
    assert checker.accepts(numbers, "2") and checker.accepts(numbers, "-0.5")
    for text in ["1", "1.0", "1.00", "1e0", "10E-1", "2.50", "25e-1"]:
        assert not checker.accepts(numbers, text), text


def test_restricted_formats_are_never_the_excluded_side(compiler):
    # hostnames of 64 characters and more are valid, but beyond the format's automaton
    long_or_host = {"oneOf": [{"type": "string", "format": "hostname"}, {"minLength": 64}]}
    with pytest.raises(GrammarError, match="oneOf"):
        compiler.compile_json_schema({"type": "string", **long_or_host})
    with pytest.raises(GrammarError, match="not"):
        compiler.compile_json_schema({"type": "string", "not": {"format": "hostname"}})


def test_non_integers_have_one_spelling(compiler, checker):
    grammar = compiler.compile_json_schema({"type": "number", "not": {"type": "integer"}})
    assert checker.accepts(grammar, "-0.25") and checker.accepts(grammar, "10.5")
    for text in ["1", "1.0", "1.50", "15e-1", "1e2", "-0", "0.0"]:
        assert not checker.accepts(grammar, text), text
