"""`contains` / `minContains`: at least that many items match the contained schema, checked token
by token (masks against accept_token) on valid and invalid documents."""

import pytest

from grammars import GrammarError

CASES = [
    (
        "contains a number",
        {"type": "array", "contains": {"type": "number"}},
        [[1], ["a", 2], [None, "x", 3.5, True], [1, 2, 3]],
        [[], ["a"], ["a", [1]], [{"n": 1}], "not an array"],
    ),
    (
        "contains beside items",
        {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 10}},
        [[10], [1, 2, 30], [11, 0]],
        [[], [1, 2, 3], [1, 20.5], [1, "20"], [9, 10.5]],
    ),
    (
        "minContains",
        {"type": "array", "contains": {"const": "x"}, "minContains": 2},
        [["x", "x"], ["x", 1, "x"], ["a", "x", "b", "x", "x"]],
        [[], ["x"], ["x", "y"], ["a", "b", "x"]],
    ),
    (
        "minContains 0 is always met",
        {"type": "array", "contains": {"const": "x"}, "minContains": 0},
        [[], ["y"], ["x"]],
        [{}],
    ),
    (
        "contains of objects through $ref",
        {
            "$defs": {"tag": {"type": "object", "required": ["k"]}},
            "type": "array",
            "items": {"type": "object"},
            "contains": {"$ref": "#/$defs/tag"},
        },
        [[{"k": 1}], [{}, {"k": "v", "z": [1]}]],
        [[], [{}], [{"j": 1}], [1, {"k": 1}]],
    ),
    (
        "contains without a type applies to arrays only",
        {"contains": {"type": "string"}},
        [["a"], 1, "text", {"a": 1}, None],
        [[], [1, 2]],
    ),
    (
        "minItems met by the contained items",
        {"type": "array", "contains": {"type": "boolean"}, "minItems": 1},
        [[True], [1, False]],
        [[], [1]],
    ),
]


@pytest.mark.parametrize("feature, schema, valid, invalid", CASES, ids=[c[0] for c in CASES])
def test_contains(checker, feature, schema, valid, invalid):
    checker.check_schema(feature, schema, valid, invalid)


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"type": "array", "contains": {}, "maxContains": 2}, "maxContains"),
        ({"type": "array", "contains": {}, "maxItems": 3}, "contains"),
        ({"type": "array", "contains": {}, "minItems": 3}, "contains"),
        ({"type": "array", "contains": {}, "uniqueItems": True}, "contains"),
        ({"type": "array", "contains": {}, "prefixItems": [{}]}, "contains"),
        ({"type": "array", "contains": {}, "minContains": 9}, "minContains"),
    ],
)
def test_contains_forms_not_enforced_raise(compiler, schema, keyword):
    with pytest.raises(GrammarError, match=keyword):
        compiler.compile_json_schema(schema)
