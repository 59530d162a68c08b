"""An anyOf whose branches only list `required` keys beside an object schema ("one of these
sets of keys must be present") compiles to one object automaton that tracks what is still
needed (members._fixed_order_needing), not to one copy of the object per branch: every subset
of the properties is judged as jsonschema judges it, masks agree with accept_token, and the
matcher follows a single stack inside the object."""

import itertools
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars.errors import GrammarError
from grammars.json_schema.one_of import needed_sets

_PROPS = {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "string"}, "d": {}}
_VALUES = {"a": 1, "b": True, "c": "x", "d": None}


def _schema(branches, **beside):
    return {
        "type": "object",
        "properties": _PROPS,
        "additionalProperties": False,
        "anyOf": [{"required": keys, "title": "t"} for keys in branches],
        **beside,
    }


_CASES = [
    ([["a"], ["b"], ["c"]], {}),
    ([["a", "b"], ["c"]], {}),
    ([["a", "d"], ["b", "d"], ["c"]], {"required": ["d"]}),
    ([["b"], ["a", "b", "c"]], {}),
    ([[], ["a"]], {}),  # an empty list: every object
    ([["c"], ["d"]], {"additionalProperties": True}),
    ([["a"], ["c"]], {"minProperties": 2}),
    ([["a"], ["d"]], {"maxProperties": 1}),
]


def _documents():
    """Every subset of the properties in the schema's order, and a few with an extra key."""
    for n in range(len(_PROPS) + 1):
        for keys in itertools.combinations(_PROPS, n):
            yield {k: _VALUES[k] for k in keys}
    yield {"a": 1, "zz": 2}
    yield {"c": "x", "zz": 2, "yy": 3}


@pytest.mark.parametrize("branches, beside", _CASES)
def test_objects_judged_as_jsonschema_does(checker, branches, beside):
    schema = _schema(branches, **beside)
    assert needed_sets({k: v for k, v in schema.items() if k != "anyOf"}, schema["anyOf"])
    grammar = checker.compiler.compile_json_schema(schema)
    for doc in _documents():
        expected = jsonschema.Draft202012Validator(schema).is_valid(doc)
        assert checker.accepts(grammar, json.dumps(doc)) == expected, (branches, doc)


@pytest.mark.parametrize("order", ["schema", "any"])
def test_one_stack_inside_the_object(checker, order):
    schema = _schema([["a"], ["b"], ["c"]])
    grammar = checker.compiler.compile_json_schema(schema, property_order=order)
    m = grammar.matcher()
    for t in checker.tok.encode('{"a": 1, "b"', add_special_tokens=False):
        assert m.accept_token(t)
    stacks = len(grammar.closure(m.state)[0])
    if order == "schema":
        assert stacks == 1  # one automaton, where there were three copies of the object
    for doc, valid in (({"a": 1, "b": True}, True), ({"d": None}, False), ({}, False)):
        assert checker.accepts(grammar, json.dumps(doc)) == valid


@pytest.mark.parametrize(
    "beside, branches",
    [
        (
            {"type": "object", "properties": _PROPS, "patternProperties": {"^x": {}}},
            [{"required": ["a"]}],
        ),
        ({"type": "object", "properties": _PROPS}, [{"required": ["a"]}, {"required": ["zz"]}]),
        ({"type": "object", "properties": _PROPS}, [{"required": ["a"], "maxProperties": 1}]),
        ({"properties": _PROPS}, [{"required": ["a"]}]),  # not only objects
        ({"type": "object", "properties": _PROPS, "not": {}}, [{"required": ["a"]}]),
    ],
)
def test_other_anyofs_left_to_branches(checker, beside, branches):
    """Only required lists, of keys the properties name, beside nothing but object keywords;
    anything else keeps one branch per object (and the same answers)."""
    assert needed_sets(beside, branches) is None
    schema = {**beside, "anyOf": branches}
    if "not" in schema:
        return
    grammar = checker.compiler.compile_json_schema(schema)
    for doc in _documents():
        expected = jsonschema.Draft202012Validator(schema).is_valid(doc)
        assert checker.accepts(grammar, json.dumps(doc)) == expected, doc


_KEYS = st.sampled_from(sorted(_PROPS))


@settings(max_examples=40, deadline=None)
@given(
    branches=st.lists(st.lists(_KEYS, max_size=3, unique=True), min_size=1, max_size=4),
    required=st.lists(_KEYS, max_size=2, unique=True),
    extra=st.booleans(),
    counts=st.sampled_from(
        [{}, {"minProperties": 2}, {"maxProperties": 2}, {"minProperties": 1, "maxProperties": 3}]
    ),
)
def test_random_key_sets_judged_as_jsonschema_does(checker, branches, required, extra, counts):
    schema = _schema(branches, required=required, additionalProperties=extra, **counts)
    validator = jsonschema.Draft202012Validator(schema)
    try:
        grammar = checker.compiler.compile_json_schema(schema)
    except GrammarError as e:  # no object holds every key a branch needs within the counts
        assert "admits no value" in str(e)
        assert not any(map(validator.is_valid, _documents()))
        return
    for doc in _documents():
        text = json.dumps(doc)
        assert checker.accepts(grammar, text, check_masks=False) == validator.is_valid(doc), doc


def test_too_many_states_of_what_is_still_needed_left_to_branches(checker):
    """Six branches of two keys each: what may still be needed takes up to 3**6 states at a
    property (each holding a copy of the members after it), so the anyOf keeps its branches."""
    props = {f"k{i}": {"type": "integer"} for i in range(12)}
    branches = [{"required": [f"k{i}", f"k{i + 6}"]} for i in range(6)]
    base = {"type": "object", "properties": props, "additionalProperties": False}
    assert needed_sets(base, branches) is None
    assert needed_sets(base, branches[:2]) is not None
    grammar = checker.compiler.compile_json_schema({**base, "anyOf": branches})
    assert checker.accepts(grammar, json.dumps({"k2": 1, "k8": 2}))
    assert not checker.accepts(grammar, json.dumps({"k2": 1, "k9": 2}))
