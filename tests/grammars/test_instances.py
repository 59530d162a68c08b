"""instances.matches: exact checks of one JSON value against a schema (True, False, or None
where it cannot be sure), and the constants it lets the compiler keep beside keywords the
engine cannot build."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammars.errors import GrammarError
from grammars.json_schema.instances import finite_values, json_key, matches

jsonschema = pytest.importorskip("jsonschema")

ROOT = {
    "$defs": {
        "small": {"type": "integer", "maximum": 9},
        "tree": {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
            "additionalProperties": False,
        },
        "loop": {"$ref": "#/$defs/loop"},
    }
}


def resolve(ref: str):
    if not ref.startswith("#/"):
        raise GrammarError(f"cannot resolve {ref}")
    target = ROOT
    for part in ref[2:].split("/"):
        target = target[part]
    return target, ref


def check(value, schema, **options):
    return matches(value, schema, resolve, **options)


DECIDED = [
    # JSON equality: 1 == 1.0, true != 1, containers element by element
    (1.0, {"const": 1}, True),
    (True, {"const": 1}, False),
    (1, {"enum": [True, False]}, False),
    ([1, {"a": 2.0}], {"const": [1.0, {"a": 2}]}, True),
    ({"a": 1, "b": 2}, {"const": {"b": 2, "a": 1}}, True),
    ([1, True], {"uniqueItems": True}, True),
    ([1, 1.0], {"uniqueItems": True}, False),
    ([{"a": [1]}, {"a": [1.0]}], {"uniqueItems": True}, False),
    # types: an integral float is an integer, a boolean is not a number
    (2.0, {"type": "integer"}, True),
    (2.5, {"type": "integer"}, False),
    (False, {"type": "number"}, False),
    ("x", {"type": ["null", "string"]}, True),
    # numbers read as the decimals written: no binary rounding
    (0.3, {"multipleOf": 0.1}, True),
    (0.35, {"multipleOf": 0.1}, False),
    (10**30, {"multipleOf": 7}, False),
    (1e-7, {"exclusiveMinimum": 0, "maximum": 1e-7}, True),
    (3, {"minimum": 3, "exclusiveMinimum": True}, False),
    (3, {"maximum": 3, "exclusiveMaximum": 3.5}, True),
    ("abc", {"minimum": 5}, True),  # bounds only constrain numbers
    # lengths in code points, patterns and formats by the engine's automata
    ("\U0001f600", {"maxLength": 1}, True),
    ("ab", {"minLength": 3}, False),
    ("a1", {"pattern": "^[a-z]+$"}, False),
    ("x-ab", {"pattern": "ab"}, True),
    ('say "hi"', {"pattern": '^say "'}, True),
    ("2024-02-29", {"format": "date"}, True),
    ("2023-02-29", {"format": "date"}, False),
    ("anything", {"format": "no-such-format"}, True),
    # arrays
    ([1, "x"], {"prefixItems": [{"type": "integer"}], "items": {"type": "string"}}, True),
    ([1, 2], {"items": [{"type": "integer"}], "additionalItems": False}, False),
    ([1, 2], {"prefixItems": [{"type": "integer"}]}, True),
    ([1, 2], {"prefixItems": [{"type": "integer"}], "minItems": 3}, False),
    (["a", 1, 2], {"contains": {"type": "integer"}, "minContains": 2}, True),
    (["a", 1, 2], {"contains": {"type": "integer"}, "maxContains": 1}, False),
    # objects
    ({"a": 1}, {"properties": {"a": {"type": "string"}}}, False),
    ({"ab": "x"}, {"patternProperties": {"^a": {"type": "string"}, "b$": {"minLength": 2}}}, False),
    ({"zz": 1}, {"properties": {"a": {}}, "additionalProperties": False}, False),
    ({"a": 1}, {"required": ["a", "b"]}, False),
    ({"a": 1, "b": 2}, {"maxProperties": 1}, False),
    ({"Ab": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}, False),
    ({"a": 1}, {"dependentRequired": {"a": ["b"]}}, False),
    # combinators, conditions and references
    (5, {"oneOf": [{"type": "integer"}, {"minimum": 2}]}, False),
    (1, {"oneOf": [{"type": "integer"}, {"minimum": 2}]}, True),
    (5, {"anyOf": [{"type": "string"}, {"maximum": 4}]}, False),
    (5, {"allOf": [{"type": "integer"}, {"not": {"const": 5}}]}, False),
    (5, {"if": {"minimum": 3}, "then": {"maximum": 4}, "else": {"type": "string"}}, False),
    (2, {"if": {"minimum": 3}, "then": {"maximum": 4}}, True),
    (12, {"$ref": "#/$defs/small"}, False),
    ({"kids": [{"kids": []}, {"kids": [{}]}]}, {"$ref": "#/$defs/tree"}, True),
    ({"kids": [{"kids": [{"x": 1}]}]}, {"$ref": "#/$defs/tree"}, False),
    # keywords beside $ref apply from draft 2019-09 on
    (12, {"$ref": "#/$defs/small", "minimum": 20}, False),
]


@pytest.mark.parametrize("value, schema, expected", DECIDED)
def test_decided_values(value, schema, expected):
    assert check(value, schema) is expected


def test_keywords_are_read_as_the_draft_defines_them():
    dependencies = {"dependencies": {"a": ["b"], "b": {"required": ["c"]}}}
    assert check({"b": 1}, dependencies, draft="older") is False
    # 2020-12 ignores dependencies, 2019-09 prefixItems, draft 7 maxContains: the engine reads
    # them all the same, so only an undecided value is safe under `not`
    assert check({"b": 1}, dependencies) is None
    assert check([1], {"prefixItems": [{"type": "string"}]}, draft="2019-09") is None
    assert check([1], {"contains": {}, "maxContains": 0}, draft="older") is None
    assert check("x", {"maxContains": 0, "type": "string"}, draft="older") is True


@pytest.mark.parametrize(
    "value, schema",
    [
        ("not an address", {"format": "email"}),  # the email automaton is a restriction
        ("x", {"format": "idn-hostname"}),  # a format the engine does not enforce
        ("x", {"$ref": "https://example.com/s.json"}),
        (1, {"$ref": "#/$defs/loop"}),
        ({"a": 1}, {"unevaluatedProperties": False}),
        ("\ud800", {"pattern": "a"}),  # a lone surrogate: no string automaton reads it
        (1, {"minimum": "3"}),  # a malformed keyword is left to the compiler to report
    ],
)
def test_undecided_values(value, schema):
    assert check(value, schema) is None


def test_a_false_keyword_decides_even_beside_an_undecided_one():
    assert check(1, {"format": "email", "type": "string"}) is False
    assert check("x", {"anyOf": [{"format": "idn-hostname"}, {"const": "x"}]}) is True
    assert check("x", {"oneOf": [{"format": "idn-hostname"}, {"type": "string"}]}) is None


def test_options_strict_and_ignored_ref_siblings():
    assert check({"a": 1}, {"properties": {}}, strict=True) is False
    assert check([1, 2], {"prefixItems": [{}]}, strict=True) is False
    assert check(12, {"$ref": "#/$defs/small", "minimum": 20}, ref_siblings=False) is False
    assert check(3, {"$ref": "#/$defs/small", "minimum": 20}, ref_siblings=False) is True


# -- agreement with jsonschema on generated schemas and values --------------------------------
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-20, 20),
    st.sampled_from([0.5, 1.0, -2.5, 3.0]),
    st.text(alphabet="ab1\u00e9\U0001f600", max_size=4),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=8,
)
COUNT = st.integers(0, 3)
LEAF_SCHEMAS = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["null", "boolean", "integer", "number", "string", "array"])}
    ),
    st.builds(lambda v: {"const": v}, VALUES),
    st.builds(lambda vs: {"enum": vs}, st.lists(VALUES, min_size=1, max_size=3)),
    st.builds(lambda n: {"minimum": n}, st.integers(-5, 5)),
    st.builds(lambda n: {"exclusiveMaximum": n}, st.sampled_from([0, 1.5, 3])),
    st.builds(lambda n: {"multipleOf": n}, st.sampled_from([1, 2, 3])),
    st.builds(lambda n: {"maxLength": n}, COUNT),
    st.builds(lambda n: {"minLength": n}, COUNT),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "^[ab]*$", "1"])),
    st.builds(lambda n: {"maxItems": n}, COUNT),
    st.builds(lambda n: {"minProperties": n}, COUNT),
    st.builds(lambda r: {"required": r}, st.lists(st.sampled_from("abc"), max_size=2)),
    st.just({"uniqueItems": True}),
)


def _combined(inner):
    return st.one_of(
        st.builds(lambda s: {"items": s}, inner),
        st.builds(lambda s: {"prefixItems": s}, st.lists(inner, max_size=2)),
        st.builds(lambda s: {"contains": s}, inner),
        st.builds(
            lambda p, a: {"properties": p, "additionalProperties": a},
            st.dictionaries(st.sampled_from("ab"), inner, max_size=2),
            inner,
        ),
        st.builds(lambda s: {"patternProperties": {"^a": s}}, inner),
        st.builds(lambda s: {"propertyNames": s}, inner),
        st.builds(lambda s: {"not": s}, inner),
        st.builds(lambda ss: {"allOf": ss}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda ss: {"anyOf": ss}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda ss: {"oneOf": ss}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, inner, inner, inner),
        st.builds(
            lambda a, b: {**a, **b} if isinstance(a, dict) and isinstance(b, dict) else a,
            inner,
            inner,
        ),
    )


SCHEMAS = st.recursive(LEAF_SCHEMAS, _combined, max_leaves=6)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, VALUES)
def test_matches_agrees_with_jsonschema(schema, value):
    found = check(value, schema)
    assert found is not None  # every keyword generated here is decided exactly
    assert found == jsonschema.Draft202012Validator(schema).is_valid(value), (schema, value)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["allOf", "anyOf", "oneOf"]),
    st.lists(LEAF_SCHEMAS, min_size=1, max_size=3),
    SCALARS,
)
def test_combinators_of_scalar_keywords_agree_with_jsonschema(kind, subs, value):
    schema = {kind: subs}
    assert check(value, schema) == jsonschema.Draft202012Validator(schema).is_valid(value)


@given(VALUES, VALUES)
def test_json_key_is_json_equality(a, b):
    assert (json_key(a) == json_key(b)) == jsonschema.Draft202012Validator({"const": a}).is_valid(b)


# -- constants beside keywords the engine cannot build ----------------------------------------
CONSTANTS_BESIDE_UNBUILT_KEYWORDS = [
    # a oneOf whose branches overlap: "a" matches both branches, so it is refused
    (
        {"enum": ["a", "abcdef", 3], "oneOf": [{"type": "string"}, {"maxLength": 3}]},
        ["abcdef", 3],
        ["a", "b"],
    ),
    # overlapping patternProperties: a key under both patterns must match both schemas
    (
        {
            "enum": [{"ab": 1}, {"ab": "x"}, {"b": "x"}],
            "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 0}},
        },
        [{"ab": 1}, {"b": "x"}],
        [{"ab": "x"}],
    ),
    # `not` of a recursive schema
    (
        {
            "$defs": {
                "tree": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
                    "additionalProperties": False,
                }
            },
            "enum": [{"kids": [{"kids": []}]}, {"kids": [{"x": 1}]}],
            "not": {"$ref": "#/$defs/tree"},
        },
        [{"kids": [{"x": 1}]}],
        [{"kids": [{"kids": []}]}],
    ),
    # uniqueItems over unbounded items
    (
        {"enum": [[1, 2], [1, 1.0], ["a", "a"]], "items": {"type": "number"}, "uniqueItems": True},
        [[1, 2]],
        [[1, 1.0], ["a", "a"], [1, 1]],
    ),
    # a const inside a property, beside an overlapping anyOf-of-oneOf
    (
        {
            "type": "object",
            "properties": {
                "kind": {"const": "x", "oneOf": [{"type": "string"}, {"pattern": "^y"}]}
            },
        },
        [{"kind": "x"}, {}],
        [{"kind": "y"}],
    ),
]


@pytest.mark.parametrize("schema, valid, invalid", CONSTANTS_BESIDE_UNBUILT_KEYWORDS)
def test_constants_beside_keywords_the_engine_cannot_build(checker, schema, valid, invalid):
    checker.check_schema("const/enum", schema, valid, invalid)


def test_constants_undecided_on_their_value_are_judged_by_the_keywords_node(checker):
    # the email automaton refuses a quoted local part (a restriction): matches leaves that
    # constant undecided and the node of "format" drops it; the other one is decided
    schema = {"enum": ["a@b.co", '"q"@b.co'], "format": "email"}
    checker.check_schema("const/enum", schema, ["a@b.co"], ['"q"@b.co', "c@d.co"])


@pytest.mark.parametrize(
    "schema, expected",
    [
        ({"anyOf": [{"const": 1}, {"enum": [2, 1.0]}]}, [1, 2]),
        ({"allOf": [{"type": "integer"}, {"enum": [1, 2]}]}, [1, 2]),
        ({"oneOf": [{"$ref": "#/$defs/small"}, {"const": 1}]}, None),
        ({"anyOf": [{"const": 1}, {"type": "string"}]}, None),
        ({"anyOf": [{"const": "a"}, False]}, ["a"]),
    ],
)
def test_finite_values_bound_what_a_schema_admits(schema, expected):
    assert finite_values(schema, resolve) == expected


def test_combinators_over_constants_are_judged_value_by_value(checker):
    schema = {
        "type": "array",
        "oneOf": [{"enum": [[1], [2, 4], [5]]}, {"enum": [[1], [1, 2]]}],
        "if": {"minItems": 1},
        "then": {"minItems": 2, "items": {"exclusiveMaximum": 5}},
    }
    checker.check_schema("oneOf of constants", schema, [[2, 4], [1, 2]], [[1], [5], [], [4, 6]])


PATTERN_OBJECTS = [
    # a named property under a pattern must match both schemas
    {"properties": {"ab": True}, "patternProperties": {"^a": {"type": "integer"}}},
    {"properties": {"ab": {"type": "string"}}, "patternProperties": {"^a": False}},
    # overlapping patterns, one of which asserts nothing (or both the same)
    {"patternProperties": {"^a": {"type": "integer"}, "b$": True, "^.$": {"type": "integer"}}},
    # additionalProperties false on one side of an allOf, patterns on the other
    {
        "allOf": [
            {"properties": {"x": {}}, "additionalProperties": False},
            {"patternProperties": {"^y": {}}},
        ]
    },
    # additionalProperties of one side beside the other's patterns: keys under them match both
    {
        "allOf": [
            {"properties": {"x": {}}, "additionalProperties": {"type": "integer"}},
            {"patternProperties": {"^a": {"minimum": 0}}},
        ]
    },
    {
        "allOf": [
            {"patternProperties": {"^.{1,3}$": False}},
            {"patternProperties": {"a": True}, "additionalProperties": False},
            {"patternProperties": {"b": {"type": "integer"}}, "additionalProperties": False},
        ]
    },
]
OBJECTS = [
    {},
    {"ab": 1},
    {"ab": "x"},
    {"a": 1},
    {"a": "x"},
    {"b": "x"},
    {"x": 1},
    {"y1": 1},
    {"x": 1, "y": 2},
    {"aaab": 1},
    {"aaab": "s"},
    {"bbbba": 2},
    {"cccc": 1},
    {"abcd": 1, "bcda": 2},
]


@pytest.mark.parametrize("schema", PATTERN_OBJECTS)
def test_pattern_properties_agree_with_matches(compiler, checker, schema):
    grammar = compiler.compile_json_schema({"type": "object", **schema})
    for doc in OBJECTS:
        expected = check(doc, schema)
        assert expected is not None
        assert checker.accepts(grammar, doc) == expected, doc
