"""Structural tags: free text, and from a trigger on exactly one structure (begin, JSON, end);
plus the bound on JSON whitespace runs."""

import pytest

from grammars import GrammarError

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def _call(name: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": '


TAG = {
    "structures": [
        {"begin": _call("get_weather"), "schema": WEATHER, "end": "}</tool_call>"},
        {"begin": _call("add"), "schema": ADD, "end": "}</tool_call>"},
    ],
    "triggers": ["<tool_call>"],
}


@pytest.fixture(scope="module")
def tag_grammar(compiler):
    return compiler.compile_structural_tag(TAG, max_whitespace_cnt=8)


@pytest.mark.parametrize(
    "text",
    [
        "Just words, no call at all.",
        'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "</tool_call>",
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> and '
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call> done',
        "a < b and tool_call without brackets",
    ],
)
def test_valid_text_is_accepted_token_by_token(tag_grammar, checker, text):
    assert checker.accepts(tag_grammar, text)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',  # no such structure
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',  # b is required
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": "2"}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_cal',
        "text <tool_call> more text",
    ],
)
def test_invalid_structures_are_refused(tag_grammar, text):
    matcher = tag_grammar.matcher()
    assert not (matcher.accept_string(text) and matcher.is_completed())


def test_a_trigger_forces_the_common_opening(tag_grammar):
    matcher = tag_grammar.matcher()
    assert matcher.accept_string("I will call a tool: <tool_call>")
    assert matcher.find_jump_forward_string() == '{"name": "'
    assert matcher.accept_string('{"name": "get_')
    assert matcher.find_jump_forward_string() == 'weather", "arguments": {'
    assert not matcher.is_completed()


def test_free_text_may_end_anywhere_but_inside_a_structure(tag_grammar):
    matcher = tag_grammar.matcher()
    assert matcher.accept_string("plain text")
    assert matcher.is_completed()
    assert matcher.accept_string(' <tool_call>{"name": "add", "arguments": {"a": 1')
    assert not matcher.is_completed()


@pytest.mark.parametrize(
    "tag, message",
    [
        ({"structures": [], "triggers": ["<a>"]}, "structures"),
        (
            {"structures": [{"begin": "<b>", "schema": {}, "end": ""}], "triggers": ["<a>"]},
            "trigger",
        ),
        ({"structures": [{"begin": "<a>", "schema": 3, "end": ""}], "triggers": ["<a>"]}, "schema"),
        ({"structures": [{"begin": "<a>"}], "triggers": [""]}, "triggers"),
        ({"structures": [{"begin": "<a>", "x": 1}], "triggers": ["<a>"]}, "structures[0]"),
        (
            {"structures": [{"begin": "<a>", "schema": {"type": "nope"}}], "triggers": ["<a>"]},
            "structures[0].schema",
        ),
        ("{not json", "JSON"),
    ],
)
def test_bad_tags_raise_grammar_error_naming_the_part(compiler, tag, message):
    with pytest.raises(GrammarError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compiler.compile_structural_tag(tag)


def test_whitespace_runs_are_bounded(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    bounded = compiler.compile_json_schema(schema, max_whitespace_cnt=4).matcher()
    assert bounded.accept_string('{"a"    :')
    assert not bounded.accept_string(" " * 5)  # a run after ':' holds at most 4
    free = compiler.compile_json_schema(schema).matcher()
    assert free.accept_string('{"a":' + " " * 200)
    # compact JSON forces the separators, so more of the text is forced
    compact = compiler.compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        any_whitespace=False,
    ).matcher()
    assert compact.find_jump_forward_string() == '{"a": '
