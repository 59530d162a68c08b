"""The walks over a whole schema before it is built: the nesting check (one level at a time),
and the keyword scans of its JSON text that spare the walks for keywords of a newer draft and
for $ref inside subschemas with an $id of their own. With the text or without it, a schema
compiles to the same rules and fails the same way."""

import json
import threading

import pytest

from grammars import GrammarError
from grammars.budget import CompileBudget, running
from grammars.errors import GrammarCancelled
from grammars.json_schema import check_depth, schema_to_rules
from grammars.json_schema.core import MAX_CONTAINERS, MAX_VALUES

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _text(schema) -> str:
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _outcome(schema, text):
    try:
        return schema_to_rules(schema, text=text)
    except GrammarError as exc:
        return str(exc)


SCHEMAS = [
    # draft 4 reads no const (nor if/then/else): both are dropped, wherever they are
    {"$schema": DRAFT4, "type": "object", "properties": {"a": {"type": "integer", "const": 3}}},
    {"$schema": DRAFT7, "properties": {"a": {"dependentRequired": {"b": ["c"]}}}},
    {"$schema": DRAFT4, "properties": {"if": {"type": "string"}, "const": {"enum": ["const"]}}},
    # the keyword only as a value (a property's name in "required"): the walk is skipped
    {"$schema": DRAFT4, "type": "object", "required": ["const"]},
    # and as a key inside a value (an enum member): walked, and kept
    {"$schema": DRAFT4, "enum": [{"const": 1}, 2]},
    # a local $ref inside a subschema with its own id (draft 4 spells it "id"): refused
    {
        "$schema": DRAFT4,
        "definitions": {
            "b": {"type": "string"},
            "a": {"id": "http://other/a.json", "$ref": "#/definitions/b"},
        },
        "$ref": "#/definitions/a",
    },
    {"$defs": {"a": {"$id": "http://other/a.json", "$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    # an $id without local references inside it, and references without an $id: built
    {"$defs": {"a": {"$id": "http://other/a.json", "type": "integer"}}, "$ref": "#/$defs/a"},
    {"properties": {"id": {"type": "string", "default": "$id"}}, "$ref": "#/$defs/x"},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_text_scans_change_nothing(schema):
    assert _outcome(schema, _text(schema)) == _outcome(schema, None)


def test_a_newer_keyword_is_still_dropped_with_the_text(compiler, checker):
    schema = SCHEMAS[0]
    grammar = compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, {"a": 4})  # const 3 is not draft 4's
    assert not checker.accepts(grammar, {"a": "x"})


def test_a_scoped_ref_is_still_refused_with_the_text(compiler):
    for schema in SCHEMAS[5:7]:
        with pytest.raises(GrammarError, match="its own"):
            compiler.compile_json_schema(schema)
        with pytest.raises(GrammarError, match="its own"):
            compiler.compile_json_schema(_text(schema))


def _nested(depth: int):
    value: list = []
    for i in range(depth - 1):
        value = [value] if i % 2 else {"a": value}
    return value


@pytest.mark.parametrize("depth", [1, 2, 9, 10])
def test_depth_counts_every_level(depth):
    check_depth(_nested(depth), depth)
    if depth > 1:
        with pytest.raises(GrammarError, match=f"more than {depth - 1} levels"):
            check_depth(_nested(depth), depth - 1)
    check_depth("not a container", 0)


def test_a_wide_level_is_counted_against_the_byte_limit():
    wide = {"items": [{"x": [1]} for _ in range(5000)]}  # 10,002 containers
    check_depth(wide, 8, 20_004)
    with pytest.raises(GrammarError, match="longer than the limit of 20000 bytes"):
        check_depth(wide, 8, 20_000)


def test_shared_subobjects_are_counted_where_they_are_used():
    shared = {"type": "string"}
    for _ in range(40):
        shared = {"anyOf": [shared, shared]}
    with pytest.raises(GrammarError, match=f"more than {MAX_CONTAINERS} objects and arrays"):
        check_depth(shared, 256)


def test_values_shared_between_places_are_counted_at_each():
    """A long list of scalars used in many places: no container to count, yet json.dumps and
    the builder would read it at each place."""
    values = [0] * 200_000
    schema = {"anyOf": [{"enum": values}] * 100}  # 20 million values
    with pytest.raises(GrammarError, match=f"more than {MAX_VALUES} values"):
        check_depth(schema, 8)
    with pytest.raises(GrammarError, match="longer than the limit of 100000 bytes"):
        check_depth({"enum": values}, 8, 100_000)
    check_depth({"enum": values}, 8, 400_000)


def test_a_wide_level_checks_the_budget():
    cancel = threading.Event()
    cancel.set()
    with running(CompileBudget(cancel=cancel)):
        check_depth({"enum": [0] * 100}, 8)  # narrow: no check needed
        with pytest.raises(GrammarCancelled):
            check_depth({"enum": [0] * 10_000}, 8)
        with pytest.raises(GrammarCancelled):
            check_depth([{"a": 1}] * 3_000, 8)
