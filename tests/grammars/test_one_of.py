"""oneOf: exact where branches are disjoint, narrowed soundly where object branches could
overlap; a value matching two branches is never accepted."""

import json

import pytest

from grammars import GrammarError

AB = {
    "oneOf": [
        {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"b": {"type": "string"}}, "required": ["b"]},
    ]
}

CASES = [
    # (feature, schema, valid documents accepted, documents refused)
    (
        "untyped branches: non-objects match both",
        AB,
        [{"a": 1}, {"b": "x"}, {"a": 1, "c": [2]}, {"b": "x", "c": None}],
        # {"a": 1, "b": "x"} matches both; {"a": "x", "b": 1} matches neither (refused by
        # the restriction too); scalars match both branches
        [{"a": 1, "b": "x"}, {}, "s", 1, None, [1], {"a": "x"}],
    ),
    (
        "a required key the other branch forbids",
        {
            "type": "object",
            "oneOf": [
                {"properties": {"names": {"type": "array"}}, "required": ["names"]},
                {"properties": {"name": {"type": "string"}}, "additionalProperties": False},
            ],
        },
        [{"names": []}, {"name": "x"}, {}, {"names": [1], "name": 2}],
        [{"names": "x"}, {"name": 1}, {"other": 1}, "x"],
    ),
    (
        "discriminator without type",
        {
            "oneOf": [
                {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"properties": {"kind": {"const": "b"}}, "required": ["kind"]},
            ]
        },
        [{"kind": "a"}, {"kind": "b", "x": 1}],
        [{"kind": "c"}, {}, "a", 3, None],
    ),
    (
        "a type both leave unconstrained is dropped from both",
        {"oneOf": [{"type": ["string", "integer"]}, {"type": ["string", "boolean"]}]},
        [1, True, False, -4],
        ["x", "", None, 1.5],
    ),
    (
        "three object branches, base keywords merged in",
        {
            "type": "object",
            "properties": {"r": {"type": "number"}, "w": {"type": "number"}},
            "oneOf": [{"required": ["r"]}, {"required": ["w"]}, {"required": ["h"]}],
        },
        [{"r": 1}, {"w": 2.5}, {"h": 3}],
        [{"r": 1, "w": 2}, {"w": 1, "h": 1}, {}, {"r": "x"}],
    ),
    (
        "branches typed through $ref and anyOf",
        {
            "$defs": {
                "id": {
                    "anyOf": [
                        {"type": "string", "pattern": "^a"},
                        {"type": "string", "pattern": "^#"},
                    ]
                }
            },
            "oneOf": [
                {"$ref": "#/$defs/id"},
                {"type": "object", "properties": {"id": {"$ref": "#/$defs/id"}}},
            ],
        },
        ["ab", "#x", {"id": "a"}, {}],
        ["b", 1, {"id": "b"}, None],
    ),
    (
        "a required property whose patterns no string matches both",
        {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["type", "value"],
                    "properties": {
                        "type": {"type": "string", "pattern": "^basic:(string|text):$"},
                        "value": {"type": "string"},
                    },
                },
                {
                    "type": "object",
                    "required": ["type", "value"],
                    "properties": {
                        "type": {"type": "string", "pattern": "^basic:int[a-z]*:$"},
                        "value": {"type": "integer"},
                    },
                },
            ]
        },
        [{"type": "basic:text:", "value": "x"}, {"type": "basic:integer:", "value": 1}],
        [{"type": "basic:text:", "value": 1}, {"type": "basic:data:", "value": 1}, {}],
    ),
    (
        "a discriminator required inside allOf members",
        {
            "$defs": {
                "ref": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"enum": ["reference"]}, "id": {"type": "string"}},
                }
            },
            "oneOf": [
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"enum": ["section"]}, "id": {"type": "integer"}},
                },
                {"allOf": [{"$ref": "#/$defs/ref"}, {"required": ["id"]}]},
            ],
        },
        [{"type": "section", "id": 1}, {"type": "reference", "id": "x"}, {"type": "section"}],
        [{"type": "reference"}, {"type": "section", "id": "x"}, {"type": "other"}, {}],
    ),
    (
        "a required property of nested objects told apart by a constant",
        {
            "oneOf": [
                {
                    "required": ["v"],
                    "properties": {
                        "v": {
                            "type": "object",
                            "required": ["k"],
                            "properties": {"k": {"const": 1}},
                        },
                        "x": {"type": "string"},
                    },
                },
                {
                    "required": ["v"],
                    "properties": {
                        "v": {
                            "type": "object",
                            "required": ["k"],
                            "properties": {"k": {"const": 2}},
                        }
                    },
                },
            ],
            "type": "object",
        },
        [{"v": {"k": 1}, "x": "s"}, {"v": {"k": 2}, "x": 3}],
        [{"v": {"k": 3}}, {"v": {}}, {"v": {"k": 1}, "x": 3}, {"v": 5}],
    ),
]


@pytest.mark.parametrize("feature,schema,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_one_of(checker, feature, schema, valid, invalid):
    checker.check_schema(feature, schema, valid, invalid)


@pytest.mark.parametrize(
    "schema",
    [
        # the second branch's objects all match the first: no key tells them apart
        {
            "oneOf": [
                {"type": "object", "required": ["a"]},
                {"type": "object", "required": ["a", "b"]},
            ]
        },
        {"oneOf": [{"required": ["a"]}, {"anyOf": [{"type": "string"}, {"required": ["b"]}]}]},
    ],
)
def test_overlap_that_cannot_be_separated_raises(compiler, schema):
    with pytest.raises(GrammarError, match="oneOf"):
        compiler.compile_json_schema(schema)


def test_separated_branches_never_accept_a_value_of_two(compiler, checker):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    grammar = compiler.compile_json_schema(schema)
    for a in (None, 1, "x"):
        for b in (None, 2, "y"):
            doc = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
            matches = sum(
                1
                for key in ("a", "b")
                if key in doc and all(isinstance(v, int) for v in doc.values())
            )
            if checker.accepts(grammar, json.dumps(doc)):
                assert matches == 1, doc


def test_overlapping_string_branches_are_made_exclusive(compiler, checker):
    """Branches that may share strings (patterns, lengths) are each reduced to the texts no
    other branch accepts; texts with escapes count by their value."""
    import itertools
    import re

    branches = [
        {"type": "string", "maxLength": 3},
        {"type": "string", "pattern": "^a+$"},
        {"type": "string", "pattern": "b"},
    ]
    grammar = compiler.compile_json_schema({"oneOf": branches})

    def matches(value: str) -> int:
        return (len(value) <= 3) + bool(re.search("^a+$", value)) + bool(re.search("b", value))

    for n in range(6):
        for chars in itertools.product("abc", repeat=n):
            value = "".join(chars)
            for text in (json.dumps(value), json.dumps(value).replace("a", "\\u0061")):
                assert checker.accepts(grammar, text) == (matches(value) == 1), text


@pytest.mark.parametrize(
    "branches,values",
    [
        ([{"type": "integer"}, {"type": "number"}], [0, 1, -3, 1.5, -0.25, 100, 2.5]),
        (
            [
                {"type": "number", "maximum": 2},
                {"type": "number", "maximum": 5},
                {"type": "integer", "minimum": 4},
            ],
            [1, 2, 2.5, 3, 4, 4.5, 5, 7],
        ),
        ([{"enum": ["a", "b", 3]}, {"enum": ["b", "c", 3.0]}], ["a", "b", "c", 3, 4]),
        ([{"const": "x"}, {"type": "string", "maxLength": 1}], ["x", "y", "", "xy"]),
    ],
)
def test_overlapping_branches_are_made_exclusive_on_canonical_texts(
    compiler, checker, branches, values
):
    """Branches whose values may have several spellings (integers as 1.0 or 1e2, escaped
    letters in constants) are made exclusive on canonical texts (one spelling per value): a
    value written so is accepted exactly when it matches one branch, and other spellings of a
    value matching two branches are never accepted."""
    import jsonschema

    grammar = compiler.compile_json_schema({"oneOf": branches})
    for value in values:
        count = sum(jsonschema.Draft202012Validator(b).is_valid(value) for b in branches)
        assert checker.accepts(grammar, json.dumps(value)) == (count == 1), value
        if count > 1 and isinstance(value, (int, float)):
            for text in (f"{value}.0", f"{value}e0", f"{value}0" if "." in str(value) else ""):
                if text:
                    assert not checker.accepts(grammar, text), text


def test_astral_characters_in_exclusive_string_branches(compiler, checker):
    """Lengths and patterns read an astral character both as itself and as its surrogate
    pair, so no spelling of a value matching both branches gets through, and every spelling
    of a value matching one does."""
    grammar = compiler.compile_json_schema(
        {"oneOf": [{"type": "string", "maxLength": 1}, {"type": "string", "pattern": "^😀+$"}]}
    )
    for text in ['"😀"', '"\\ud83d\\ude00"', '"\\uD83D\\uDE00"', '"ab"', '"\\ud83d"']:
        assert not checker.accepts(grammar, text), text
    for text in ['"x"', '"\\u0078"', '"😀😀"', '""', '"\\ud83d\\ude00😀"', '"\\ud83d\\ude01"']:
        assert checker.accepts(grammar, text), text


ALL_OF_ALTERNATIVES = [
    # two oneOf lists: exactly one branch of each
    {
        "allOf": [
            {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            {
                "oneOf": [
                    {"type": "string", "maxLength": 2},
                    {"type": "integer", "minimum": 0},
                    {"type": "null"},
                ]
            },
        ]
    },
    # an anyOf beside a oneOf whose integer branches overlap (2 matches both: refused)
    {
        "allOf": [
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            {
                "oneOf": [
                    {"type": "string", "maxLength": 2},
                    {"type": "integer", "minimum": 0},
                    {"type": "integer", "multipleOf": 2},
                ]
            },
        ]
    },
]


@pytest.mark.parametrize("schema", ALL_OF_ALTERNATIVES)
def test_all_of_combines_one_of_with_other_alternatives_exactly(compiler, checker, schema):
    from grammars.json_schema.instances import matches

    grammar = compiler.compile_json_schema(schema)
    for value in ["", "ab", "abc", -3, -2, -1, 0, 1, 2, 3, 1.5, None, True, [], {}]:
        expected = matches(value, schema, lambda ref: None)
        assert checker.accepts(grammar, json.dumps(value)) == expected, value


SHAPE = {
    "type": "object",
    "properties": {k: {"type": "number"} for k in ("radius", "length", "width", "base")},
    "additionalProperties": {"type": "string"},
}
PRESENCE_ONE_OFS = [
    [{"required": ["radius"]}, {"required": ["length", "width"]}],
    [{"required": ["radius"]}, {"required": ["length"], "not": {"required": ["width"]}}],
    [{"required": ["length"]}, {"required": ["width"]}, {"required": ["base"], "title": "x"}],
    [{"required": ["radius"]}, {"not": {"required": []}}],  # the second holds for no object
]


@pytest.mark.parametrize("order", ["schema", "any"])
@pytest.mark.parametrize("branches", PRESENCE_ONE_OFS)
def test_one_of_over_required_keys_splits_by_presence(compiler, checker, branches, order):
    # branches that only say which keys are present overlap (an object may have them all)
    # and hold free-form members; split by which keys are present, the oneOf is exact:
    # every object over these keys against jsonschema
    import itertools

    import jsonschema

    schema = {**SHAPE, "oneOf": branches}
    grammar = compiler.compile_json_schema(schema, property_order=order)
    keys = ["radius", "length", "width", "base", "note"]
    seen = 0
    for size in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, size):
            doc = {k: ("x" if k == "note" else 1.5) for k in chosen}
            valid = jsonschema.Draft202012Validator(schema).is_valid(doc)
            assert checker.accepts(grammar, doc, check_masks=False) == valid, doc
            seen += valid
    assert seen >= 4
    checker.accepts(grammar, {"radius": 2, "note": "a"})  # masks against accept_token


def test_one_of_over_required_keys_that_the_base_requires_admits_nothing(compiler):
    schema = {**SHAPE, "required": ["radius", "length", "width"], "oneOf": PRESENCE_ONE_OFS[0]}
    with pytest.raises(GrammarError, match="admits no value"):
        compiler.compile_json_schema(schema)
