"""uniqueItems over free strings: the matcher refuses a duplicate item (grammars/unique_items.py,
grammars/json_schema/unique.py)."""

import json
import pickle
import random

import jsonschema
import numpy as np
import pytest

from grammars import CompiledGrammar, GrammarError, unique_items
from grammars.compiler import build_machine

TAGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
DOC = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": TAGS},
    "required": ["name", "tags"],
}


@pytest.mark.parametrize(
    "data, valid",
    [
        ([], True),
        (["a"], True),
        (["a", "b", "ab", "ba", ""], True),
        (["a", "a"], False),
        (["a", "b", "a"], False),
        (["", ""], False),
        (["ab", "a", "abc", "a"], False),
        (["é", "e", "\u00e9"], False),  # one value, however it is written
        (["x y", "x  y"], True),
    ],
)
def test_duplicates_refused_token_by_token(compiler, checker, data, valid):
    grammar = compiler.compile_json_schema(TAGS)
    assert checker.accepts(grammar, json.dumps(data)) == valid
    assert checker.accepts(grammar, json.dumps(data, ensure_ascii=False)) == valid


def test_escaped_spellings_are_one_value(compiler, checker):
    grammar = compiler.compile_json_schema(TAGS)
    assert not checker.accepts(grammar, '["a", "\\u0061"]')
    assert not checker.accepts(grammar, '["a\\"b", "a\\u0022b"]')
    assert not checker.accepts(grammar, '["\\/", "/"]')
    assert checker.accepts(grammar, '["a\\\\", "a"]')


def _all_tokens_agree(grammar, text: str, tokenizer) -> int:
    """At the end of `text`, the mask allows exactly the tokens accept_token takes; returns
    how many it refuses that the automaton alone would allow."""
    m = grammar.matcher()
    assert m.accept_string(text)
    mask = m.next_token_mask()
    refused = 0
    plain = grammar.mask(m.state)
    plain = grammar.vocab.unpack(plain)
    for tid in np.flatnonzero(plain | mask).tolist():
        ok = m.accept_token(tid)
        if ok:
            m.rollback(1)
        assert ok == mask[tid], (text, tid, tokenizer.decode([tid]))
        refused += bool(plain[tid] and not ok)
    return refused


def test_mask_is_exact_over_the_vocabulary(compiler, smollm2_tokenizer):
    grammar = compiler.compile_json_schema(DOC)
    # inside an item that could still become a duplicate: `."` (one token) would close it
    assert _all_tokens_agree(grammar, '{"name": "n", "tags": ["x.", "x', smollm2_tokenizer)
    # between items: ` ""` (one token) would be a whole duplicate item
    assert _all_tokens_agree(grammar, '{"name": "n", "tags": ["", "a",', smollm2_tokenizer)
    # no item seen yet, or no earlier item it could equal: nothing refused
    assert not _all_tokens_agree(grammar, '{"name": "n", "tags": ["', smollm2_tokenizer)
    assert not _all_tokens_agree(grammar, '{"name": "n", "tags": ["x.", "y', smollm2_tokenizer)


def test_rollback_forgets_items(compiler, smollm2_tokenizer):
    grammar = compiler.compile_json_schema(TAGS)
    m = grammar.matcher()
    ids = smollm2_tokenizer.encode('["alpha", "beta"', add_special_tokens=False)
    for t in ids:
        assert m.accept_token(t)
    again = smollm2_tokenizer.encode(', "beta"]', add_special_tokens=False)
    probe = [m.accept_token(t) for t in again]
    assert not all(probe)
    m.rollback(sum(probe))
    m.rollback(len(ids) - 2)  # back to `["alpha`: beta was never written
    assert m.accept_string('", "beta"]')
    m.reset()
    assert m.accept_string('["beta", "alpha"]') and m.is_completed()


def test_each_array_has_its_own_items(compiler, checker):
    schema = {"type": "array", "items": DOC}
    grammar = compiler.compile_json_schema(schema)
    doc = [{"name": "a", "tags": ["x", "y"]}, {"name": "a", "tags": ["x", "y"]}]
    assert checker.accepts(grammar, json.dumps(doc))
    doc[1]["tags"].append("x")
    assert not checker.accepts(grammar, json.dumps(doc))
    # strings elsewhere do not count: a name equal to a tag, the same key in two objects
    assert checker.accepts(grammar, json.dumps([{"name": "x", "tags": ["x", "name"]}]))


@pytest.mark.parametrize(
    "schema, doc_of",
    [
        # through $ref, allOf, additionalProperties, prefixItems / items, draft 4 tuples
        (
            {"$defs": {"t": TAGS}, "properties": {"a": {"$ref": "#/$defs/t"}}},
            lambda tags: {"a": tags},
        ),
        ({"allOf": [{"properties": {"a": TAGS}}, {"required": ["a"]}]}, lambda tags: {"a": tags}),
        ({"type": "object", "additionalProperties": TAGS}, lambda tags: {"k": [], "z": tags}),
        ({"prefixItems": [{"type": "integer"}], "items": TAGS}, lambda tags: [1, tags, tags]),
        (
            {"$schema": "http://json-schema.org/draft-04/schema#", "items": [TAGS]},
            lambda tags: [tags],
        ),
        # "a string or a list of distinct strings": the value's type picks the branch
        (
            {"properties": {"a": {"anyOf": [{"type": "string"}, TAGS]}}},
            lambda tags: {"a": tags},
        ),
        (
            {"definitions": {"s": {"type": "string", "minLength": 1}}}
            | {"properties": {"a": {"oneOf": [{"$ref": "#/definitions/s"}, TAGS]}}},
            lambda tags: {"a": tags},
        ),
        # a recursive tree of tagged nodes
        (
            {
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {
                            "tags": TAGS,
                            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                        },
                    }
                },
                "$ref": "#/$defs/node",
            },
            lambda tags: {"tags": ["a"], "kids": [{"tags": tags, "kids": []}, {"tags": tags}]},
        ),
    ],
)
def test_places_found_through_the_schema(compiler, checker, schema, doc_of):
    grammar = compiler.compile_json_schema(schema)
    assert grammar.machine.unique is not None
    assert checker.accepts(grammar, json.dumps(doc_of(["a", "b"])))
    assert not checker.accepts(grammar, json.dumps(doc_of(["a", "b", "a"])))


@pytest.mark.parametrize(
    "schema",
    [
        # a place known only once the document is read: the automaton cannot leave it out
        {"anyOf": [{"properties": {"a": TAGS}}, {"properties": {"a": {"type": "array"}}}]},
        {"oneOf": [TAGS, {"type": "array", "items": {"type": "integer"}}]},
        {"patternProperties": {"^a": TAGS}},
        {"if": {"required": ["b"]}, "then": {"properties": {"a": TAGS}}},
        {"dependentSchemas": {"b": {"properties": {"a": TAGS}}}},
        {"properties": {"a": TAGS}, "not": {"properties": {"a": TAGS}}},
        # the same array schema also placed by anyOf elsewhere
        {
            "$defs": {"t": TAGS},
            "properties": {
                "a": {"$ref": "#/$defs/t"},
                "b": {"anyOf": [{"$ref": "#/$defs/t"}, {"type": "array"}]},
            },
        },
        # items with finitely many values from some prefix: a duplicate could be forced
        {"type": "array", "items": {"type": "string", "pattern": "^a+$"}, "uniqueItems": True},
        {"type": "array", "items": {"type": "string", "format": "date"}, "uniqueItems": True},
        {"type": "array", "prefixItems": [{"const": "a"}], "items": {"type": "string"}}
        | {"uniqueItems": True},
    ],
)
def test_places_the_matcher_cannot_know_still_raise(compiler, schema):
    with pytest.raises(GrammarError, match="uniqueItems"):
        compiler.compile_json_schema(schema)


def test_random_documents_match_jsonschema(compiler, checker):
    schema = {
        "type": "object",
        "properties": {
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"tags": TAGS, "ids": {"type": "array"}},
                    "required": ["tags"],
                },
            }
        },
        "required": ["groups"],
    }
    grammar = compiler.compile_json_schema(schema)
    rng = random.Random(7)
    words = ["a", "b", "ab", "é", "\\", '"', " ", ""]
    outcomes = set()
    for _ in range(60):
        groups = [
            {
                "tags": [rng.choice(words) for _ in range(rng.randint(0, 4))],
                "ids": [rng.choice(words) for _ in range(rng.randint(0, 2))],
            }
            for _ in range(rng.randint(1, 3))
        ]
        doc = {"groups": groups}
        valid = jsonschema.Draft202012Validator(schema).is_valid(doc)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        assert checker.accepts(grammar, text) == valid, text
        outcomes.add(valid)
    assert outcomes == {True, False}


def test_jump_forward_and_eos(compiler, smollm2_tokenizer):
    schema = {"type": "object", "properties": {"t": TAGS, "k": {"const": "fixed"}}}
    schema["required"] = ["t", "k"]
    grammar = compiler.compile_json_schema(schema, any_whitespace=False)
    m = grammar.matcher()
    assert m.find_jump_forward_string() == '{"t": ['
    assert m.accept_string('{"t": ["x", "y"], ')
    assert m.find_jump_forward_string().startswith('"k": "fixed"')
    assert m.accept_string('"k": "fixed"}')
    assert m.accept_token(int(compiler.vocab.eos_ids[0])) and m.is_terminated()


def test_machine_built_elsewhere_keeps_the_check(compiler):
    machine = pickle.loads(pickle.dumps(build_machine("json_schema", DOC)))
    grammar = CompiledGrammar(machine, compiler.vocab)
    assert grammar.matcher().accept_string('{"name": "a", "tags": ["x", "y"]}')
    m = grammar.matcher()
    assert not m.accept_string('{"name": "a", "tags": ["x", "x"]}')


CALL = {"type": "object", "properties": {"tags": TAGS, "n": {"type": "integer"}}}


def _tool_tag(*names, schema=CALL):
    structures = [
        {
            "begin": f'<tool_call>{{"name": "{n}", "arguments": ',
            "schema": schema,
            "end": "}</tool_call>",
        }
        for n in names
    ]
    return {"structures": structures, "triggers": ["<tool_call>"]}


def _call(name, tags):
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps({"tags": tags})}}}</tool_call>'


def test_structural_tags_find_each_call(compiler, checker):
    grammar = compiler.compile_structural_tag(_tool_tag("a", "b"))
    assert grammar.machine.unique is not None
    ok = 'Let me call ["x", "x"] {: ' + _call("b", ["x", "y"]) + " then " + _call("a", ["x"])
    assert checker.accepts(grammar, ok)
    # free text and other calls hold the same strings freely; each call's array is checked
    assert not checker.accepts(grammar, "Now " + _call("a", ["x", "y", "x"]))
    assert not checker.accepts(grammar, _call("a", ["q"]) + " and " + _call("b", ["z", "z"]))
    tricky = {"tags": ["</tool_call>", "<tool_call>"], "n": 1}
    text = f'<tool_call>{{"name": "a", "arguments": {json.dumps(tricky)}}}</tool_call>'
    assert checker.accepts(grammar, text)
    tricky["tags"].append("</tool_call>")
    text = f'<tool_call>{{"name": "a", "arguments": {json.dumps(tricky)}}}</tool_call>'
    assert not checker.accepts(grammar, text)


@pytest.mark.parametrize(
    "tag",
    [
        _tool_tag("a", schema={"anyOf": [CALL, {"type": "array"}]}),  # where does it end?
        {  # a trigger's tail may start a begin: the first trigger need not start the call
            "structures": [{"begin": "aab", "schema": CALL, "end": "."}],
            "triggers": ["aa"],
        },
        {  # one begin is a prefix of another
            "structures": [
                {"begin": "<f>", "schema": CALL, "end": "."},
                {"begin": "<f>x", "schema": CALL, "end": "."},
            ],
            "triggers": ["<f>"],
        },
    ],
)
def test_structural_tags_that_cannot_be_followed_refuse(compiler, tag):
    with pytest.raises(GrammarError, match="uniqueItems"):
        compiler.compile_structural_tag(tag)


def test_tagged_scanner_reads_any_split(compiler):
    grammar = compiler.compile_structural_tag(_tool_tag("a", "b"))
    plan = grammar.machine.unique
    texts = [
        "x <tool_ " + _call("a", ["p", "q"]) + "<" + _call("b", ["q", "p", "q"]) + " z",
        _call("b", ["}</tool_call>", "<tool_call>"]) + "</tool_call" + _call("a", ["r", "r"]),
    ]
    for text in texts:
        data = text.encode()
        whole = unique_items.feed(plan, unique_items.initial(plan), data)
        assert whole is None  # each holds a call with a duplicate
        for size in range(1, 9):
            state = unique_items.initial(plan)
            for i in range(0, len(data), size):
                state = unique_items.feed(plan, state, data[i : i + size])
                if state is None:
                    break
            assert state is None, (text, size)


def test_tool_calls_with_distinct_string_arguments(compiler, checker):
    from runtime.server.tool_calls import ToolSpec

    tools = [
        {"type": "function", "function": {"name": "tag", "parameters": CALL}},
        {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}},
    ]
    auto = ToolSpec.from_request(tools, "auto", None).constraint()["structural_tag"]
    grammar = compiler.compile_structural_tag(auto)
    prefix = auto["structures"][0]["begin"]
    good = prefix + '{"tags": ["a", "b"], "n": 2}' + auto["structures"][0]["end"]
    assert checker.accepts(grammar, "Sure. " + good)
    assert not checker.accepts(grammar, "Sure. " + good.replace('"b"', '"a"'))
    named = {"type": "function", "function": {"name": "tag"}}
    forced = ToolSpec.from_request(tools, named, None).constraint()["json_schema"]
    grammar = compiler.compile_json_schema(forced)
    assert checker.accepts(grammar, '{"name": "tag", "arguments": {"tags": ["a", "b"]}}')
    assert not checker.accepts(grammar, '{"name": "tag", "arguments": {"tags": ["a", "a"]}}')


def _kinds(first="kind", required=("kind", "tags"), extra=None):
    def branch(kind, tags):
        props = {first: {"const": kind}, "tags": tags} if first == "kind" else {}
        if first != "kind":
            props = {"tags": tags, "kind": {"const": kind}}
        out = {"type": "object", "properties": props, "required": list(required)}
        return out | (extra or {})

    return {
        "oneOf": [branch("a", TAGS), branch("b", {"type": "array", "items": {"type": "string"}})]
    }


def test_branches_picked_by_a_first_constant(compiler, checker):
    grammar = compiler.compile_json_schema(_kinds())
    assert checker.accepts(grammar, '{"kind": "a", "tags": ["x", "y"]}')
    assert not checker.accepts(grammar, '{"kind": "a", "tags": ["x", "y", "x"]}')
    assert checker.accepts(grammar, '{"kind": "b", "tags": ["x", "x"]}')  # b allows repeats
    assert not checker.accepts(grammar, '{"kind": "a", "tags": ["x", "x"]}')
    tools = {"type": "array", "items": _kinds(extra={"additionalProperties": False})}
    grammar = compiler.compile_json_schema(tools)
    doc = '[{"kind": "b", "tags": ["x", "x"]}, {"kind": "a", "tags": ["x"]}]'
    assert checker.accepts(grammar, doc)
    assert not checker.accepts(grammar, doc.replace('["x"]', '["x", "x"]'))


def test_a_choice_beside_named_keys_checks_every_branch(compiler, checker):
    # a key named beside the branches may come before the one that picks: every branch's
    # check is made (sound; here it refuses a repeat that branch b would allow)
    schema = {"allOf": [{"properties": {"note": {"type": "string"}}}, _kinds()]}
    grammar = compiler.compile_json_schema(schema)
    assert grammar.machine.unique is not None
    assert checker.accepts(grammar, '{"kind": "b", "tags": ["x", "y"]}')
    assert not checker.accepts(grammar, '{"kind": "a", "tags": ["x", "x"]}')
    assert not checker.accepts(grammar, '{"kind": "b", "tags": ["x", "x"]}')  # the restriction


@pytest.mark.parametrize(
    "schema, options",
    [
        (_kinds(), {"property_order": "any"}),  # the constant may come after the array
        (_kinds(first="tags"), {}),  # not the first property
        (_kinds(required=("tags",)), {}),  # may be left out
    ],
)
def test_branches_the_document_may_not_pick_first_raise(compiler, schema, options):
    with pytest.raises(GrammarError, match="uniqueItems"):
        compiler.compile_json_schema(schema, **options)


def test_required_tool_calls_with_several_tools(compiler, checker):
    from runtime.server.tool_calls import ToolSpec

    tools = [
        {"type": "function", "function": {"name": "tag", "parameters": CALL}},
        {"type": "function", "function": {"name": "other", "parameters": CALL}},
    ]
    for parallel in (False, True):
        spec = ToolSpec.from_request(tools, "required", parallel)
        grammar = compiler.compile_json_schema(spec.constraint()["json_schema"])
        call = '{"name": "other", "arguments": {"tags": ["a", "b"]}}'
        bad = '{"name": "tag", "arguments": {"tags": ["a", "a"]}}'
        wrap = (lambda c: f"[{c}]") if parallel else (lambda c: c)
        assert checker.accepts(grammar, wrap(call))
        assert not checker.accepts(grammar, wrap(bad))


def test_cached_grammars_keep_the_property_order(compiler, checker):
    ab = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    ba = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}}
    assert checker.accepts(compiler.compile_json_schema(ab), '{"a": 1, "b": 2}')
    assert checker.accepts(compiler.compile_json_schema(ba), '{"b": 2, "a": 1}')
