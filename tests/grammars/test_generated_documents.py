"""Documents generated from schemas (hypothesis-jsonschema), checked valid with jsonschema, are
accepted token by token: the grammar engine must not refuse what the schema allows."""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings

hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema")
jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = {
    "scalars": {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -50, "maximum": 1000},
            "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5},
            "m": {"type": "integer", "multipleOf": 7},
            "b": {"type": "boolean"},
            "z": {"type": "null"},
        },
        "required": ["n", "x"],
        "additionalProperties": False,
    },
    "strings": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
            "name": {"type": "string", "minLength": 2, "maxLength": 12},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "ip": {"type": "string", "format": "ipv4"},
            "kind": {"enum": ["a", "b", 3, None]},
        },
        "required": ["code", "day"],
    },
    "arrays": {
        "type": "array",
        "items": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "minItems": 1,
            "maxItems": 3,
        },
        "maxItems": 4,
    },
    "one_of": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                "required": ["kind", "r"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}},
                "required": ["kind", "side"],
                "additionalProperties": False,
            },
        ]
    },
    "counts": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}},
        "minProperties": 2,
        "maxProperties": 3,
        "additionalProperties": False,
    },
    "refs": {
        "$defs": {
            "leaf": {
                "type": "object",
                "properties": {"value": {"type": "string", "maxLength": 5}},
                "required": ["value"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "first": {"$ref": "#/$defs/leaf"},
            "rest": {"type": "array", "items": {"$ref": "#/$defs/leaf"}, "maxItems": 2},
        },
    },
    "any value": {},
}


# a documented restriction (docs/grammars.md): bounded numbers are written without an exponent
_EXPONENT = re.compile(r"[0-9][eE][+-]?[0-9]")


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_generated_documents_are_accepted(compiler, checker, name):
    schema = SCHEMAS[name]
    # hypothesis-jsonschema writes properties in any order
    grammar = compiler.compile_json_schema(schema, property_order="any")
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(hypothesis_jsonschema.from_schema(schema))
    def check(doc):
        text = json.dumps(doc)
        if not validator.is_valid(doc) or _EXPONENT.search(text):
            return
        assert checker.accepts(grammar, text, check_masks=False), doc

    check()
