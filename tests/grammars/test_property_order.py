"""property_order="any" on objects whose members are large: each member becomes a rule of its
own (one move per set of members written), so the automaton stays small; every order accepted
once, duplicates and missing required members refused, masks checked token by token."""

import itertools
import json

import pytest

from grammars.json_schema.containers import _MEMBER_COPIES
from grammars.json_schema.core import node_size

INNER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}},
        "when": {"type": "string", "format": "date"},
    },
    "required": ["id"],
}
NAMES = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"]
WIDE = {
    "type": "object",
    "properties": {name: INNER for name in NAMES},
    "required": ["alpha", "delta"],
}
VALUE = {"id": 3, "tags": ["x"], "when": "2024-02-29"}


def test_members_become_rules(compiler):
    from grammars.json_schema.builder import schema_to_rules

    rules, _ = schema_to_rules(WIDE, property_order="any")
    members = [name for name in rules if name.startswith("member")]
    assert len(members) == len(NAMES) + 1  # and the extra member (additionalProperties)
    assert node_size(rules["root"], 10**6) < 64 * _MEMBER_COPIES


@pytest.mark.parametrize("size", [2, 4, 7])
def test_every_order_accepted(compiler, checker, size):
    grammar = compiler.compile_json_schema(WIDE, property_order="any")
    chosen = ["delta", "alpha"] + [n for n in NAMES if n not in ("alpha", "delta")][: size - 2]
    orders = list(itertools.permutations(chosen))[:: max(1, len(chosen) ** 3)][:6]
    for order in orders:
        doc = {name: dict(VALUE, id=i) for i, name in enumerate(order)}
        assert checker.accepts(grammar, json.dumps(doc)), order
        inner_reordered = {name: {"when": "2023-01-31", "id": 1} for name in order}
        assert checker.accepts(grammar, json.dumps(inner_reordered), check_masks=False)


def test_refusals(compiler, checker):
    grammar = compiler.compile_json_schema(WIDE, property_order="any")
    v = json.dumps(VALUE)

    def obj(*members):
        return "{" + ", ".join(f'"{k}": {val}' for k, val in members) + "}"

    for doc in [
        obj(("alpha", v)),  # delta missing
        obj(("delta", v), ("alpha", v), ("delta", v)),  # a duplicate
        obj(("delta", v), ("alpha", '{"tags": []}')),  # id missing inside
        obj(("delta", v), ("alpha", '{"id": 1, "when": "2023-02-29"}')),  # no such day
        obj(("beta", v), ("alpha", v), ("delta", "1")),
    ]:
        assert not checker.accepts(grammar, doc), doc
    assert checker.accepts(grammar, obj(("extra", "[1, {}]"), ("delta", v), ("alpha", v)))


def test_member_counts_in_any_order(compiler, checker):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}},
        "minProperties": 2,
        "maxProperties": 2,
        "additionalProperties": False,
    }
    grammar = compiler.compile_json_schema(schema, property_order="any")
    for doc in ['{"b": "", "a": 0}', '{"c": [], "a": 1}', '{"b": "x", "c": null}']:
        assert checker.accepts(grammar, doc), doc
    for doc in ['{"a": 0}', '{"c": 1, "b": "", "a": 0}', "{}", '{"a": 1, "a": 2}']:
        assert not checker.accepts(grammar, doc), doc
