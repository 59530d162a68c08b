"""Tool definitions, the call grammar's schema, output parsing and prompt rendering, without
a server (the behaviour end to end is in test_tool_calls.py)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.model.loader import load_tokenizer
from runtime.server.tokenizer_manager import BadRequest
from runtime.server.tool_calls import ToolCall, ToolCallStream, ToolSpec
from runtime.server.tool_prompt import TemplateSupport, call_text, render_messages

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "$defs": {"n": {"type": "integer"}},
            "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
            "required": ["a", "b"],
        },
    },
}
ECHO = {  # a property named like a keyword, and data that looks like a reference
    "type": "function",
    "function": {
        "name": "echo",
        "parameters": {
            "type": "object",
            "$defs": {"s": {"type": "string"}},
            "properties": {"const": {"$ref": "#/$defs/s"}},
            "default": {"$ref": "#/not/a/reference"},
        },
    },
}
TOOLS = [ADD, ECHO]
DEEP = {"type": "object"}
for _ in range(990):
    DEEP = {"type": "object", "properties": {"x": DEEP}}


def spec(choice="auto", parallel=None) -> ToolSpec:
    return ToolSpec.from_request(TOOLS, choice, parallel)


def test_none_and_absent_tools_give_no_spec():
    assert ToolSpec.from_request(TOOLS, "none", None) is None
    assert ToolSpec.from_request(None, None, None) is None
    assert ToolSpec.from_request(None, "none", None) is None
    assert spec(None).choice == "auto" and spec(None).parallel


@pytest.mark.parametrize(
    "tools, choice, field",
    [
        ([{"type": "function", "function": {"name": "a b"}}], "auto", "tools"),
        ([{"type": "function", "function": {"name": "x" * 65}}], "auto", "tools"),
        ([{"type": "code", "function": {"name": "f"}}], "auto", "tools"),
        ([{"type": "function", "function": {"name": "f", "extra": 1}}], "auto", "tools"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}], "auto", "tools"),
        ([], "auto", "tools"),
        ([ADD, ADD], "auto", "tools"),
        (TOOLS, {"type": "function", "function": {"name": "mul"}}, "tool_choice"),
        (TOOLS, {"type": "function", "name": "add"}, "tool_choice"),
        (TOOLS, "any", "tool_choice"),
        (None, "auto", "tool_choice"),
        ([{"type": "function", "function": {"name": "f", "parameters": DEEP}}], "auto", "tools"),
    ],
)
def test_bad_definitions_name_the_field(tools, choice, field):
    with pytest.raises(BadRequest) as e:
        ToolSpec.from_request(tools, choice, None)
    assert e.value.param == field


def test_parameters_default_to_an_empty_object():
    s = ToolSpec.from_request([{"type": "function", "function": {"name": "f"}}], "auto", None)
    assert s.tools[0].parameters == {"type": "object", "properties": {}}


NAMED = {"type": "function", "function": {"name": "echo"}}


@pytest.mark.parametrize("choice, parallel", [("required", True), ("required", False), (NAMED, 0)])
def test_calls_schema_accepts_calls_and_rebases_references(choice, parallel):
    s = spec(choice, parallel)
    schema = s.calls_schema()

    def check(name, arguments):
        call = {"name": name, "arguments": arguments}
        jsonschema.validate([call] if s.as_list else call, schema)

    check("echo", {"const": "x"})  # the rebased $ref resolves
    with pytest.raises(jsonschema.ValidationError):
        check("echo", {"const": 1})
    if s.choice == "named":
        with pytest.raises(jsonschema.ValidationError):
            check("add", {"a": 1, "b": 2})
    else:
        check("add", {"a": 1, "b": 2})
    assert '{"$ref": "#/not/a/reference"}' in json.dumps(schema)


def test_structural_tag_has_one_structure_per_tool():
    tag = spec().structural_tag()
    assert tag["triggers"] == ["<tool_call>"]
    assert [s["begin"] for s in tag["structures"]] == [
        '<tool_call>{"name": "add", "arguments": ',
        '<tool_call>{"name": "echo", "arguments": ',
    ]
    assert all(s["end"] == "}</tool_call>" for s in tag["structures"])


CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'


@pytest.mark.parametrize(
    "text, content, calls",
    [
        ("just text ", "just text ", []),
        (f"Let me add.\n{CALL}", "Let me add.", [("add", '{"a": 1, "b": 2}')]),
        (f"{CALL}\n{CALL}", None, [("add", '{"a": 1, "b": 2}')] * 2),
        ('<tool_call>{"name": "mul", "arguments": {}}</tool_call>', None, []),  # unknown tool
        ("<tool_call>not json</tool_call> ok", None, []),
        ('<tool_call>{"name": "add", "arguments": {"a": 1', None, []),  # cut off
        ('<tool_call>\n{"name": "echo", "arguments": "{}"}\n', None, [("echo", "{}")]),
    ],
)
def test_tagged_calls_are_parsed(text, content, calls):
    """Without calls the content is the whole text; with them, the text before the first."""
    parsed = spec().parse_output(text)
    assert (parsed.content, parsed.calls) == (content if calls else text, calls)


def test_one_call_only_without_parallel_calls():
    assert len(spec("auto", False).parse_output(f"{CALL}{CALL}").calls) == 1


def test_json_calls_are_parsed():
    one = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    assert spec("required", False).parse_output(one).calls == [("add", '{"a": 1, "b": 2}')]
    assert len(spec("required").parse_output(f"[{one}, {one}]").calls) == 2
    cut = spec("required").parse_output(f"[{one}, {one[:9]}")
    assert len(cut.calls) == 1 and cut.content is None
    assert spec("required").parse_output("[").calls == []


def test_json_too_deep_to_handle_is_text():
    deep = "[" * 100_000
    assert spec().parse_output(f"<tool_call>{deep}</tool_call>").calls == []
    assert spec("required", False).parse_output(deep).calls == []
    arguments = '{"a": ' * 950 + "1" + "}" * 950
    call = f'<tool_call>{{"name": "add", "arguments": {arguments}}}</tool_call>'
    assert spec().parse_output(call).calls == []
    assert call_text(ToolCall("c", "add", deep)).startswith('<tool_call>{"name": "add", "argu')


def replay(s: ToolSpec, text: str, cuts: list[int]) -> tuple[str | None, list[tuple[str, str]]]:
    """(content, calls) that a stream sends for `text` arriving in pieces ending at `cuts`."""
    stream, deltas = ToolCallStream(s), []
    for cut in sorted(cuts):
        deltas += stream.deltas(text[:cut], final=False)
    deltas += stream.deltas(text, final=True)
    content, calls = "", []
    for d in deltas:
        content += d.get("content", "")
        for part in d.get("tool_calls", []):
            if "id" in part:
                calls.append([part["function"]["name"], ""])
            else:
                calls[part["index"]][1] += part["function"]["arguments"]
    return (content or None), [tuple(c) for c in calls]


PIECES = [
    "Sure",
    ", ",
    " <",
    "tool_",
    CALL,
    "\n",
    "<tool_call>oops</tool_call>",
    '<tool_call>{"name": "echo", "arguments": {}}',
    "</tool_call>",
    " more <",
    "text",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8), st.booleans(), st.data())
def test_streamed_deltas_add_up_to_the_whole_response(pieces, parallel, data):
    """Whatever the text and wherever it is cut, the stream says what the response says."""
    s, text = spec("auto", parallel), "".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    whole = s.parse_output(text)
    content, calls = replay(s, text, cuts)
    assert calls == whole.calls
    assert content == (whole.content if whole.calls else (text or None))


def test_streamed_json_calls_add_up():
    text = '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "echo", "arguments": {}}]'
    s = spec("required")
    assert replay(s, text, list(range(len(text))))[1] == s.parse_output(text).calls


@pytest.fixture(scope="module")
def tokenizer(smollm2_folder):
    return load_tokenizer(smollm2_folder)


def test_smollm2_template_gets_the_fallback(tokenizer):
    support = TemplateSupport.detect(tokenizer)
    assert support == TemplateSupport(tools=False, tool_calls=False, tool_role=True)


def history() -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "", "tool_calls": [ToolCall("c1", "add", '{"a":1}')]},
        {"role": "tool", "content": "3", "tool_call_id": "c1"},
        {"role": "tool", "content": "4", "tool_call_id": "c2"},
    ]


def test_fallback_rendering():
    support = TemplateSupport(tools=False, tool_calls=False, tool_role=False)
    messages, tools = render_messages(history(), spec("required"), support)
    assert tools is None
    system = messages[0]["content"]
    assert system.startswith("Be brief.\n\n") and '"name": "add"' in system
    assert "<tools>" in system and "one or more tools" in system
    assert messages[2] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
    }
    assert messages[3] == {
        "role": "user",
        "content": "<tool_response>\n3\n</tool_response>\n<tool_response>\n4\n</tool_response>",
    }
    assert len(messages) == 4


def test_template_rendering_passes_tools_and_calls():
    support = TemplateSupport(tools=True, tool_calls=True, tool_role=True)
    messages, tools = render_messages(history()[1:], spec(), support)
    assert [t["function"]["name"] for t in tools] == ["add", "echo"]
    assert messages[0] == {"role": "user", "content": "1+2?"}  # no system section added
    call = messages[1]["tool_calls"][0]
    assert call["function"] == {"name": "add", "arguments": {"a": 1}}
    assert messages[2] == {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}


# a Hermes-style template that renders tools, calls and tool results itself
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_with_tools_renders_them_itself(smollm2_folder):
    tokenizer = load_tokenizer(smollm2_folder)
    tokenizer.chat_template = TOOL_TEMPLATE
    support = TemplateSupport.detect(tokenizer)
    assert support == TemplateSupport(tools=True, tool_calls=True, tool_role=True)
    messages, tools = render_messages(history()[1:], spec(), support)
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert '<tools>{"type": "function", "function": {"name": "add"' in text
    assert '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>' in text
    assert "<|im_start|>tool\n3<|im_end|>" in text and "You can call" not in text
