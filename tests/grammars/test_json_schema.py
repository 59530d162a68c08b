"""JSON Schema features: valid documents accepted token by token (EOS then allowed), invalid ones
refused, the mask agreeing with accept_token at every step."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars import GrammarError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

CASES = [
    # (feature, schema, valid documents, invalid documents)
    ("type", {"type": "integer"}, [0, -5, 123456789], [1.5, "1", None, "01"]),
    ("type list", {"type": ["string", "null"]}, ["x", None], [1, True]),
    ("number", {"type": "number"}, [0, -1.5, 3.25e10, 1e-7], ["1", None, "-"]),
    ("boolean", {"type": "boolean"}, [True, False], [0, "true"]),
    ("enum", {"enum": ["red", "green", 3, None]}, ["red", "green", 3, None], ["blue", 4, "Red"]),
    ("const", {"const": {"a": [1, 2]}}, [{"a": [1, 2]}], [{"a": [1]}, {"a": [1, 2], "b": 1}]),
    (
        "properties/required",
        PERSON,
        [{"name": "Ann", "age": 30}, {"name": "Bob", "age": 1, "email": "b@x.org"}],
        [
            {"name": "Ann"},
            {"age": 3, "name": "x"},
            {"name": "A", "age": 3, "zip": 1},
            {"name": "A", "age": 3, "email": "not-an-email"},
        ],
    ),
    (
        "optional skippable",
        {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer"},
                "c": {"type": "integer"},
            },
            "additionalProperties": False,
        },
        [{}, {"a": 1}, {"b": 2}, {"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3}],
        [{"c": 1, "a": 2}, {"d": 1}, {"a": "x"}],
    ),
    (
        "minProperties/maxProperties counting optional and extra members",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "minProperties": 1,
            "maxProperties": 2,
        },
        [{"a": 1}, {"b": 2}, {"x": 3}, {"a": 1, "b": 2}, {"a": 1, "x": "y"}, {"x": 1, "y": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}, {"x": 1, "y": 2, "z": 3}, {"a": "no"}],
    ),
    (
        "minProperties beyond the required ones",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": False,
            "minProperties": 2,
        },
        [{"a": 1, "b": 2}],
        [{"a": 1}, {"b": 2}, {}],
    ),
    (
        "propertyNames: named, pattern and additional keys",
        {
            "type": "object",
            "properties": {"ok": {"type": "integer"}, "TOO_LONG": {}},
            "patternProperties": {"^n_": {"type": "integer"}},
            "propertyNames": {"pattern": "^[a-z_]+$", "maxLength": 5},
        },
        [{"ok": 1}, {"n_ab": 2}, {"abc": "x"}, {}],
        [{"TOO_LONG": 1}, {"abcdef": 1}, {"Ab": 1}, {"n_a": "x"}, {"n_abcd": 1}],
    ),
    ("propertyNames false: only the empty object", {"propertyNames": False}, [{}, 1], [{"a": 1}]),
    (
        "additionalProperties schema",
        {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
        },
        [{"id": 1}, {"id": 1, "x": "y"}, {"x": "y", "z": "w"}],
        [{"id": 1, "x": 2}, {"id": "1"}],
    ),
    (
        "additionalProperties true",
        {"type": "object", "properties": {"id": {"type": "integer"}}},
        [{"id": 1, "extra": {"deep": [1, {"x": None}]}}, {}],
        [{"id": "no"}],
    ),
    (
        "patternProperties",
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        },
        [{"x-a": 1}, {"x-": 2, "x-b": 3}],
        [{"y": 1}, {"x-a": "1"}],
    ),
    (
        "items",
        {"type": "array", "items": {"type": "integer"}},
        [[], [1], [1, 2, 3]],
        [[1, "a"], ["a"], {}],
    ),
    (
        "prefixItems",
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [["a", 1], ["a"], []],
        [[1, "a"], ["a", 1, 2]],
    ),
    (
        "minItems/maxItems",
        {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
        [[True], [True, False]],
        [[], [True, True, True]],
    ),
    (
        "minLength/maxLength",
        {"type": "string", "minLength": 2, "maxLength": 3},
        ["ab", "abc", "é\u00e9", "\n\t"],
        ["a", "abcd", ""],
    ),
    (
        "pattern",
        {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
        ["AB-1", "XY-0042"],
        ["ab-1", "AB-", "AB-1x"],
    ),
    ("pattern unanchored", {"type": "string", "pattern": "cat"}, ["cat", "concatenate"], ["dog"]),
    (
        "format date-time",
        {"type": "string", "format": "date-time"},
        ["2024-01-31T12:30:00Z", "2024-02-01T00:00:00.5+01:00"],
        ["2024-13-01T00:00:00Z", "now"],
    ),
    ("format date", {"type": "string", "format": "date"}, ["1999-12-31"], ["1999-12-32", "99"]),
    ("format time", {"type": "string", "format": "time"}, ["23:59:59Z"], ["24:00:00Z"]),
    (
        "format uuid",
        {"type": "string", "format": "uuid"},
        ["123e4567-e89b-12d3-a456-426614174000"],
        ["123e4567"],
    ),
    (
        "format uri",
        {"type": "string", "format": "uri"},
        ["https://example.com/a?b=c"],
        ["no scheme"],
    ),
    ("format ipv4", {"type": "string", "format": "ipv4"}, ["192.168.0.1"], ["256.1.1.1"]),
    (
        "format ipv6",
        {"type": "string", "format": "ipv6"},
        ["::1", "2001:db8::8a2e:370:7334"],
        ["12345::"],
    ),
    ("format hostname", {"type": "string", "format": "hostname"}, ["example.com"], ["-bad"]),
    (
        "minimum/maximum",
        {"type": "integer", "minimum": -3, "maximum": 120},
        [-3, 0, 7, 99, 120],
        [-4, 121, 1000],
    ),
    (
        "exclusive bounds",
        {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        [1, 9],
        [0, 10],
    ),
    (
        "number bounds",
        {"type": "number", "minimum": 0, "maximum": 1},
        [0, 0.5, 1, 1.0],
        [-0.1, 1.01, 2],
    ),
    ("multipleOf", {"type": "integer", "multipleOf": 7}, [0, 14, -21, 700], [1, 15]),
    (
        "anyOf",
        {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]},
        [1, "a"],
        ["ab", None],
    ),
    ("oneOf disjoint", {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, [1, True], ["x"]),
    (
        "oneOf discriminator",
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                    "required": ["kind"],
                },
                {
                    "type": "object",
                    "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
                    "required": ["kind"],
                },
            ]
        },
        [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}, {"kind": "a", "z": [1]}],
        [{"kind": "c"}, {"kind": "a", "x": "s"}],
    ),
    (
        "allOf",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        [{"a": 1, "b": "x"}],
        [{"a": 1}, {"b": "x"}],
    ),
    (
        "$ref/$defs",
        {
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "type": "array",
            "items": {"$ref": "#/$defs/pos"},
        },
        [[1, 2]],
        [[0]],
    ),
    (
        "definitions",
        {
            "definitions": {"s": {"type": "string"}},
            "properties": {"a": {"$ref": "#/definitions/s"}},
            "type": "object",
            "additionalProperties": False,
        },
        [{"a": "x"}],
        [{"a": 1}],
    ),
    (
        "recursive $ref",
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer"},
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                    "required": ["v"],
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        [{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]}],
        [{"v": 1, "kids": [{"x": 2}]}, {"kids": []}],
    ),
    (
        "string escapes",
        {"type": "string"},
        ['quote " back \\ slash / nl \n tab \t', "\u0001", "日本語", "emoji 😀"],
        [1],
    ),
    ("empty schema", {}, [None, 1, "x", [1, {"a": []}], {"k": {"k": True}}], []),
    (
        "dependencies (property names and schemas)",
        {
            "type": "object",
            "properties": {
                "card": {"type": "integer"},
                "billing": {"type": "string"},
                "cvc": {"type": "string"},
                "zip": {"type": "string"},
            },
            "dependencies": {
                "card": ["billing"],
                "zip": {"properties": {"cvc": {"maxLength": 3}}, "required": ["cvc"]},
            },
        },
        [
            {},
            {"billing": "x"},
            {"card": 1, "billing": "x"},
            {"cvc": "1234"},
            {"cvc": "12", "zip": "z"},
        ],
        [{"card": 1}, {"card": 1, "cvc": "1"}, {"zip": "z"}, {"cvc": "1234", "zip": "z"}],
    ),
    (
        "dependentRequired and dependentSchemas",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependentRequired": {"a": ["b"]},
            "dependentSchemas": {"b": {"properties": {"a": {"minimum": 10}}}},
        },
        [{"b": 1}, {"a": 10, "b": 1}, {}],
        [{"a": 10}, {"a": 9, "b": 1}],
    ),
]


@pytest.mark.parametrize("feature,schema,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_schema_feature(checker, feature, schema, valid, invalid):
    checker.check_schema(feature, schema, valid, invalid)


def test_whitespace_is_json_standard_and_compact_mode_is_exact(compiler, checker):
    loose = compiler.compile_json_schema(PERSON)
    assert checker.accepts(loose, '{ "name" :"a",\n\t"age": 1 }')
    compact = compiler.compile_json_schema(PERSON, any_whitespace=False)
    assert checker.accepts(compact, '{"name": "a", "age": 1}')
    assert not checker.accepts(compact, '{"name":"a","age":1}')
    tight = compiler.compile_json_schema(PERSON, any_whitespace=False, separators=(",", ":"))
    assert checker.accepts(tight, '{"name":"a","age":1}')


def test_strict_mode_forbids_unnamed_properties(compiler, checker):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert checker.accepts(compiler.compile_json_schema(schema), {"a": 1, "b": 2})
    assert not checker.accepts(
        compiler.compile_json_schema(schema, strict_mode=True), {"a": 1, "b": 2}
    )


@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"not": {"type": "string", "pattern": "a"}}, "not"),  # any value but those strings
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "if": {"not": {"minLength": 2}}, "then": {}}, "not"),
        ({"type": "object", "propertyNames": {"$ref": "#/x"}}, "$ref"),
        ({"oneOf": [{"type": "object", "required": ["a"]}, {"required": ["a", "b"]}]}, "oneOf"),
        ({"type": "string", "pattern": "(a)\\1"}, "pattern"),
        ({"$ref": "http://example.com/schema"}, "$ref"),
        ({"type": "wat"}, "type"),
        (  # each dependency doubles the alternatives: at most six
            {"type": "object", "dependencies": {k: ["z"] for k in "abcdefg"}},
            "dependencies",
        ),
    ],
)
def test_unsupported_keywords_raise_naming_them(compiler, schema, keyword):
    with pytest.raises(GrammarError, match=re.escape(keyword)):
        compiler.compile_json_schema(schema)


@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"type": "number", "minimum": float("nan")}, "minimum"),
        ({"type": "number", "maximum": float("inf")}, "maximum"),
        ({"type": "number", "exclusiveMinimum": float("-inf")}, "exclusiveMinimum"),
        ({"type": "object", "propertyNames": 3}, "propertyNames"),
        ({"type": "array", "uniqueItems": "yes", "items": {"enum": [1, 2]}}, "uniqueItems"),
        # were accepted (a string taken as its characters, an object as its keys) ...
        ({"type": "object", "required": "a"}, "required"),
        ({"type": "string", "format": 5}, "format"),
        ({"allOf": {}}, "allOf"),
        # ... or refused with the message of whatever broke first
        ({"type": "object", "required": [1]}, "required"),
        ({"type": "string", "minLength": -3}, "minLength"),
        ({"type": "string", "minLength": True}, "minLength"),
        ({"type": "string", "pattern": 5}, "pattern"),
        ({"type": 5}, "type"),
    ],
)
def test_malformed_keyword_values_raise_naming_them(compiler, schema, keyword):
    with pytest.raises(GrammarError, match=keyword):
        compiler.compile_json_schema(schema)


@pytest.mark.parametrize(
    "schema,where",
    [
        ({"properties": {"a": {"type": "wat"}}}, "#/properties/a"),
        ({"type": "array", "items": {"$ref": "#/definitions/missing"}}, "#/items"),
        ({"properties": {"p": {"type": "string", "pattern": "(^a)*b"}}}, "#/properties/p"),
        ({"anyOf": [{"type": "integer", "multipleOf": 1716.5}]}, "#/anyOf/0"),
        (  # named by the keyword itself: once only
            {"properties": {"o": {"oneOf": [{"type": "object"}, {"required": ["a"]}]}}},
            "#/properties/o",
        ),
    ],
)
def test_errors_name_the_subschema_where_they_arose(compiler, schema, where):
    with pytest.raises(GrammarError) as caught:
        compiler.compile_json_schema(schema)
    message = str(caught.value)
    assert f"({where})" in message or f" at {where}" in message, message
    assert message.count("(#") + message.count(" at #") == 1, message


@pytest.mark.parametrize(
    "schema, where",
    [
        ('{"properties": {"\\ud800": {"type": "wat"}}}', "#/properties/\\ud800"),
        ('{"properties": {"a\\udc00": {"minimum": "x"}}}', "#/properties/a\\udc00"),
        ('{"type": "string", "pattern": "\\ud800("}', "'\\ud800('"),
    ],
)
def test_errors_about_lone_surrogates_can_be_sent(compiler, schema, where):
    """A key or value holding a lone surrogate (valid JSON text, not valid UTF-8) is named in
    the message as an escape: the message encodes as UTF-8, so a server can send it."""
    with pytest.raises(GrammarError) as caught:
        compiler.compile_json_schema(schema)
    message = str(caught.value)
    message.encode("utf-8")
    assert where in message, message


def test_impossible_schema_raises(compiler):
    with pytest.raises(GrammarError):
        compiler.compile_json_schema({"type": "integer", "minimum": 5, "maximum": 1})
    with pytest.raises(GrammarError):
        compiler.compile_json_schema("{not json")


@settings(max_examples=60, deadline=None)
@given(st.integers(-(10**6), 10**6), st.integers(-1000, 1000), st.integers(0, 2000))
def test_integer_ranges_agree_with_arithmetic(compiler, lo, offset, width):
    lo = lo // 1000 + offset
    hi = lo + width
    grammar = compiler.compile_json_schema({"type": "integer", "minimum": lo, "maximum": hi})
    for x in {lo - 1, lo, lo + 1, (lo + hi) // 2, hi - 1, hi, hi + 1, -lo, 0}:
        m = grammar.matcher()
        assert (m.accept_string(str(x)) and m.is_completed()) == (lo <= x <= hi), (lo, hi, x)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=12))
def test_any_string_round_trips(compiler, checker, text):
    grammar = compiler.compile_json_schema({"type": "string"})
    for spelling in (json.dumps(text), json.dumps(text, ensure_ascii=False)):
        m = grammar.matcher()
        assert m.accept_string(spelling) and m.is_completed(), spelling


@settings(max_examples=25, deadline=None)
@given(
    st.fixed_dictionaries(
        {"name": st.text(max_size=8), "age": st.integers(-(10**9), 10**9)},
        optional={"email": st.from_regex(r"[a-z]{1,5}@[a-z]{1,5}\.(com|org)", fullmatch=True)},
    )
)
def test_generated_documents_are_accepted(compiler, checker, doc):
    ordered = {k: doc[k] for k in ("name", "age", "email") if k in doc}
    assert checker.accepts(compiler.compile_json_schema(PERSON), ordered, check_masks=False)


def test_not(compiler, checker):
    g = compiler.compile_json_schema({"type": "string", "not": {"enum": ["a", "b"]}})
    assert checker.accepts(g, '"c"') and checker.accepts(g, '"ab"')
    assert not checker.accepts(g, '"a"') and not checker.accepts(g, '"b"')
    g = compiler.compile_json_schema({"type": ["integer", "null"], "not": {"type": "null"}})
    assert checker.accepts(g, "3") and not checker.accepts(g, "null")
    with pytest.raises(GrammarError, match="not"):
        compiler.compile_json_schema({"not": {"type": "object", "minProperties": 2}})


@pytest.mark.parametrize(
    "schema, longest, too_long",
    [
        ({"type": "integer"}, "1" * 12, "1" * 13),
        ({"type": "integer", "minimum": 0}, "9" * 12, "9" * 13),
        ({"type": "number"}, "0." + "3" * 12, "0." + "3" * 13),
        ({"type": "number"}, "1e" + "9" * 12, "1e" + "9" * 13),
        ({"type": "integer", "multipleOf": 3}, "3" * 12, "3" * 13),
        ({}, "[" + "7" * 12 + "]", "[" + "7" * 13 + "]"),  # any JSON value
        ({"type": "object"}, '{"a": ' + "7" * 12 + "}", '{"a": ' + "7" * 13 + "}"),
    ],
)
def test_max_number_digits_bounds_each_digit_run(compiler, schema, longest, too_long):
    bounded = compiler.compile_json_schema(schema, max_number_digits=12)
    assert bounded.matcher().accept_string(longest)
    assert not bounded.matcher().accept_string(too_long)
    assert compiler.compile_json_schema(schema).matcher().accept_string(too_long)  # default


def test_max_number_digits_never_cuts_what_the_schema_bounds(compiler):
    huge = 10**30
    finite = compiler.compile_json_schema(
        {"type": "integer", "minimum": 0, "maximum": huge}, max_number_digits=4
    )
    assert finite.matcher().accept_string(str(huge))
    above = compiler.compile_json_schema({"type": "integer", "minimum": huge}, max_number_digits=4)
    assert above.matcher().accept_string(str(huge + 1))


def test_all_of_merges_differing_extension_annotations(compiler):
    schema = {
        "allOf": [
            {"type": "object", "x-note": "first", "properties": {"a": {"type": "integer"}}},
            {"x-note": "second", "required": ["a"]},
        ]
    }
    m = compiler.compile_json_schema(schema).matcher()
    assert m.accept_string('{"a": 1}')
    assert not compiler.compile_json_schema(schema).matcher().accept_string("{}")


def test_property_counts_too_large_to_track_raise(compiler):
    props = {f"p{i}": {"type": "integer"} for i in range(300)}
    with pytest.raises(GrammarError, match="maxProperties"):
        compiler.compile_json_schema({"type": "object", "properties": props, "maxProperties": 299})


def test_all_of_combines_two_nots_two_refs_and_differing_annotations(compiler, checker):
    schema = {  # (keywords beside $ref apply from draft 2019-09 on)
        "definitions": {
            "short": {"type": "string", "maxLength": 3},
            "lower": {"type": "string", "pattern": "^[a-z]*$"},
        },
        "allOf": [
            {"$ref": "#/definitions/short", "not": {"enum": ["ab"]}, "_id": 1},
            {"$ref": "#/definitions/lower", "not": {"enum": ["cd"]}, "_id": 2},
        ],
    }
    grammar = compiler.compile_json_schema(schema)
    for doc in ["abc", "", "x"]:
        assert checker.accepts(grammar, json.dumps(doc)), doc
    for doc in ["ab", "cd", "abcd", "ABC", 1]:
        assert not checker.accepts(grammar, json.dumps(doc)), doc


@pytest.mark.parametrize(
    "schema, valid, invalid",
    [
        (  # both patterns must match
            {"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}]},
            ["ab", "axb"],
            ["a", "b", "ba"],
        ),
        (  # multiples of both: of their least common multiple
            {"allOf": [{"type": "number", "multipleOf": 0.5}, {"multipleOf": 0.75}]},
            [0, 1.5, 3, -4.5],
            [0.5, 0.75, 1, 2.25],
        ),
        (  # two conditions
            {
                "type": "integer",
                "allOf": [
                    {"if": {"minimum": 10}, "then": {"multipleOf": 2}},
                    {"if": {"minimum": 20}, "then": {"multipleOf": 3}},
                ],
            },
            [1, 3, 10, 12, 24],
            [11, 21, 22],
        ),
        ({"allOf": [{"const": True}, {"const": 1}]}, [], [True, 1]),  # true is not 1
        ({"type": "array", "uniqueItems": True, "maxItems": 1}, [[], [1]], [[1, 2]]),
        (  # two patternProperties: a key under a pattern of either matches its schema
            {
                "type": "object",
                "allOf": [
                    {"patternProperties": {"^a": {"type": "integer"}}},
                    {"patternProperties": {"^b": {"type": "string"}, "^a": {"minimum": 0}}},
                ],
            },
            [{"a1": 1, "b": "x", "c": None}, {}],
            [{"a1": -1}, {"b": 2}, {"a": "x"}],
        ),
    ],
)
def test_all_of_merges_exactly(compiler, checker, schema, valid, invalid):
    try:
        grammar = compiler.compile_json_schema(schema)
    except GrammarError:
        assert not valid  # a schema no value matches
        return
    for doc in valid:
        assert checker.accepts(grammar, json.dumps(doc)), doc
    for doc in invalid:
        assert not checker.accepts(grammar, json.dumps(doc)), doc


def test_unique_items_over_a_few_constants_is_exact(compiler, checker):
    schema = {
        "type": "array",
        "uniqueItems": True,
        "items": {"enum": ["a", "b", 1, 1.0, True, None]},
        "minItems": 1,
        "maxItems": 3,
    }
    grammar = compiler.compile_json_schema(schema)
    for doc in [["a"], ["b", "a"], [1, True, None], [None, "a", 1]]:
        assert checker.accepts(grammar, json.dumps(doc)), doc
    for doc in [[], ["a", "a"], [1, 1.0], ["a", "b", None, 1], [True, None, True], ["c"]]:
        assert not checker.accepts(grammar, json.dumps(doc)), doc
    both = compiler.compile_json_schema({"uniqueItems": True, "items": {"type": "boolean"}})
    assert checker.accepts(both, "[true, false]") and checker.accepts(both, "[]")
    assert not checker.accepts(both, "[false, false]")


@pytest.mark.parametrize(
    "items",
    [
        {"type": "string", "maxLength": 3},  # finitely many values: a duplicate could be forced
        {"type": "integer"},
        {"enum": list(range(9))},
        {"enum": [[1], [2]]},
    ],
)
def test_unique_items_beyond_a_few_constants_raises(compiler, items):
    with pytest.raises(GrammarError, match="uniqueItems"):
        compiler.compile_json_schema({"type": "array", "uniqueItems": True, "items": items})


ORDERED = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "null"}},
    "required": ["a", "b"],
}


def test_property_order_any_accepts_every_order_once(compiler, checker):
    grammar = compiler.compile_json_schema(ORDERED, property_order="any")
    for doc in [
        '{"a": 1, "b": "x"}',
        '{"b": "x", "a": 1}',
        '{"c": null, "b": "x", "extra": [1], "a": 1}',
        '{"extra": 1, "a": 1, "b": "x"}',
    ]:
        assert checker.accepts(grammar, doc), doc
    for doc in ['{"a": 1}', '{"b": "x", "a": 1, "a": 2}', '{"b": 1, "a": 1}', '{"c": 1}', "{}"]:
        assert not checker.accepts(grammar, doc), doc
    assert not checker.accepts(compiler.compile_json_schema(ORDERED), '{"b": "x", "a": 1}')
    with pytest.raises(GrammarError, match="property_order"):
        compiler.compile_json_schema(ORDERED, property_order="sorted")


@settings(max_examples=30, deadline=None)
@given(st.permutations(["a", "b", "c", "d", "e"]), st.integers(2, 5))
def test_property_order_any_agrees_with_permutations(compiler, order, size):
    schema = {
        "type": "object",
        "properties": {k: {"const": i} for i, k in enumerate("abcde")},
        "required": ["a"],
        "additionalProperties": False,
    }
    grammar = compiler.compile_json_schema(schema, property_order="any")
    doc = {k: "abcde".index(k) for k in order[:size]}
    m = grammar.matcher()
    assert (m.accept_string(json.dumps(doc)) and m.is_completed()) == ("a" in doc)


def test_all_of_patterns_under_another_schemas_additional_properties_raise(compiler):
    # a key only the second schema's pattern names must also match the first's
    # additionalProperties, which one merged schema cannot say (but for false: propertyNames)
    schema = {
        "allOf": [
            {"patternProperties": {"^a": {}}, "additionalProperties": {"type": "integer"}},
            {"patternProperties": {"^b": {}}},
        ]
    }
    with pytest.raises(GrammarError, match="patternProperties"):
        compiler.compile_json_schema(schema)


def test_six_dependencies_are_exact_and_seven_raise(compiler, checker):
    from itertools import combinations

    from grammars.json_schema.instances import matches

    names = "abcdef"
    deps = {n: [names[(i + 1) % 6]] for i, n in enumerate(names)}  # a needs b, ..., f needs a
    schema = {"type": "object", "dependencies": deps, "additionalProperties": {"type": "integer"}}
    grammar = compiler.compile_json_schema(schema, property_order="any")
    for k in range(3):
        for chosen in combinations(names, k):
            doc = dict.fromkeys(chosen, 1)
            expected = matches(doc, schema, lambda ref: None, draft="older")
            assert checker.accepts(grammar, doc, check_masks=False) == expected, doc
    assert checker.accepts(grammar, dict.fromkeys(names, 1), check_masks=False)
    deps["g"] = ["a"]
    with pytest.raises(GrammarError, match="dependencies"):
        compiler.compile_json_schema({"type": "object", "dependencies": deps})
