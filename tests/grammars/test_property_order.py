"""property_order="any" on objects whose members are large: each member becomes a rule of its
own (one move per set of members written), so the automaton stays small; every order accepted
once, duplicates and missing required members refused, masks checked token by token."""

import itertools
import json

import pytest

from grammars import GrammarError
from grammars.json_schema import schema_to_rules
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


def _member_docs(names: list[str], extras: list[str], most: int) -> list[str]:
    """Every object of up to `most` members drawn from names and extras (an extra key may
    repeat), in every order, as text; member i's value is i so values differ."""
    keys = names + extras + extras[:1]  # the first extra twice: a repeated key
    docs = []
    for size in range(most + 1):
        for chosen in itertools.permutations(keys, size):
            if len(set(chosen) & set(names)) < sum(k in names for k in chosen):
                continue  # a named key twice: not a case of interest
            docs.append("{" + ", ".join(f'"{k}": {i}' for i, k in enumerate(chosen)) + "}")
    return sorted(set(docs))


@pytest.mark.parametrize(
    "counts", [(2, None), (0, 2), (1, 3), (3, 3), (2, 4)], ids=lambda c: f"min{c[0]}-max{c[1]}"
)
def test_counted_members_with_extras_in_any_order(compiler, checker, counts):
    # every object of up to five members from three named properties and extra keys, against
    # jsonschema: nothing invalid accepted; a valid one refused only where the documented
    # restriction bites (a repeated key, counted each time toward maxProperties; minProperties
    # met only by a second extra key, as a repeated key would count once)
    import jsonschema

    lo, hi = counts
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {}},
        "required": ["a"],
        "additionalProperties": {"type": "integer", "maximum": 3},
        "minProperties": lo,
    }
    if hi is not None:
        schema["maxProperties"] = hi
    grammar = compiler.compile_json_schema(schema, property_order="any")
    expected = 0
    for doc in _member_docs(["a", "b", "c"], ["x", "y"], 5):
        pairs = json.loads(doc, object_pairs_hook=list)
        keys = [k for k, _ in pairs]
        named = len(set(keys) & {"a", "b", "c"})
        valid = jsonschema.Draft202012Validator(schema).is_valid(dict(pairs))
        exact = len(keys) == len(set(keys)) and named + min(len(keys) - named, 1) >= lo
        got = checker.accepts(grammar, doc, check_masks=False)
        assert not got or valid, doc  # a repeated key: its last value (as json.loads reads)
        if valid and exact:
            assert got, doc
            expected += 1
    assert expected >= 9
    # masks against accept_token along a few documents
    for doc in ['{"x": 1, "a": 0, "b": 2}', '{"c": [], "y": 0, "a": 1}', '{"a": 1, "x": 3}']:
        checker.accepts(grammar, doc)


MANY = {
    "type": "object",
    "properties": {f"p{i}": {"type": "integer", "maximum": 9} for i in range(16)},
    "required": ["p3", "p11"],
    "additionalProperties": {"type": "string"},
}


def test_objects_with_too_many_sets_take_members_in_any_order_repeating(compiler, checker):
    # 16 properties: too many sets to track each, so keys may come again (each value checked,
    # a reader keeping the last, as for extra keys); the required ones are still tracked
    import jsonschema

    members = node_size(schema_to_rules(MANY, property_order="any")[0]["root"])
    assert members < 50_000
    grammar = compiler.compile_json_schema(MANY, property_order="any")
    for doc in [
        {"p11": 1, "p3": 2},
        {"x": "a", "p15": 0, "p11": 1, "p0": 3, "p3": 2},
        {f"p{i}": i % 10 for i in reversed(range(16))},
    ]:
        assert jsonschema.validate(doc, MANY) is None
        assert checker.accepts(grammar, doc), doc
    assert checker.accepts(grammar, '{"p3": 1, "p11": 2, "p3": 3}')  # read as {"p3": 3, ...}
    for text in [
        '{"p3": 1}',  # p11 missing
        '{"p11": 1, "p0": 2}',  # p3 missing
        '{"p11": 1, "p3": 10}',  # above the maximum
        '{"p11": 1, "p3": 2, "x": 3}',  # an extra key's value must be a string
        '{"p11": 1, "p3": 2, "p3": 12}',  # the value kept is invalid
        "{}",
    ]:
        assert not checker.accepts(grammar, text), text
    assert not checker.accepts(grammar, '{"p11": 1, "p3": 2, "p3": "a"}', check_masks=False)


def test_repeating_members_are_inexact_for_one_of(compiler):
    # a key that may come again cannot tell oneOf branches apart: not accepted as separated
    first = {**MANY, "properties": {**MANY["properties"], "p0": {"const": 1}}}
    try:
        grammar = compiler.compile_json_schema({"oneOf": [first, MANY]}, property_order="any")
    except GrammarError:
        return
    m = grammar.matcher()
    assert not (m.accept_string('{"p3": 1, "p11": 2, "p0": 2, "p0": 1}') and m.is_completed())


def test_object_constants_in_any_order(compiler, checker):
    """An object const/enum value (nested ones too) with property_order="any": every order of
    its members, each once; the schema's order otherwise."""
    value = {"a": 1, "b": {"x": True, "y": [1, {"p": None, "q": "s"}]}, "c": "t"}
    schema = {"enum": [value, {"a": 2}]}
    grammar = compiler.compile_json_schema(schema, property_order="any")
    fixed = compiler.compile_json_schema(schema)
    for order in itertools.permutations("abc"):
        inner = {"y": [1, {"q": "s", "p": None}], "x": True}
        doc = {k: (inner if k == "b" else value[k]) for k in order}
        assert checker.accepts(grammar, json.dumps(doc)), doc
        assert not checker.accepts(fixed, json.dumps(doc)), doc
        in_order = {k: value[k] for k in order}
        assert checker.accepts(fixed, json.dumps(in_order)) == (order == ("a", "b", "c")), order
    for doc in [
        '{"a": 1, "c": "t"}',  # b missing
        '{"a": 1, "a": 1, "b": {"x": true, "y": [1, {"p": null, "q": "s"}]}, "c": "t"}',
        '{"c": "t", "a": 1, "b": {"x": true, "y": [1, {"p": null}]}}',
        '{"c": "t", "a": 1, "b": {"x": true, "y": [1, {"p": null, "q": "s"}]}, "d": 0}',
        '{"c": "t", "a": 2, "b": {"x": true, "y": [1, {"p": null, "q": "s"}]}}',
    ]:
        assert not checker.accepts(grammar, doc), doc
    assert checker.accepts(grammar, '{"a": 2}')
    big = {f"k{i}": i for i in range(13)}  # 8,192 sets of members: kept in the written order
    grammar = compiler.compile_json_schema({"const": big}, property_order="any")
    assert checker.accepts(grammar, json.dumps(big))
    assert not checker.accepts(grammar, json.dumps(dict(reversed(big.items()))))
