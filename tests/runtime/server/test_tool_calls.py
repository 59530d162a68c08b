"""Tool calls on /v1/chat/completions against a real SmolLM2 server, through the openai client.

SmolLM2's template has no tools, so these run through the fallback prompt; the grammar is
what keeps the small model's calls valid, and every call's arguments are checked against its
tool's schema with jsonschema. One server serves the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import jsonschema
import pytest

from examples.tool_calls import TOOLS as EXAMPLE_TOOLS
from tests.runtime.server_helpers import SharedServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

WEATHER = EXAMPLE_TOOLS[0]  # city and unit
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",  # with a local $ref
        "parameters": {
            "type": "object",
            "$defs": {"expr": {"type": "string", "maxLength": 20}},
            "properties": {"expression": {"$ref": "#/$defs/expr"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, CALCULATOR]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def weather_call(call_id: str, city: str) -> dict:
    """An assistant message that called get_weather, as a client sends it back."""
    arguments = json.dumps({"city": city, "unit": "celsius"})
    function = {"name": "get_weather", "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


# an earlier exchange the small model copies: without it, it answers weather questions in text
EARLIER_CALL = [
    {"role": "user", "content": "What is the weather in London?"},
    weather_call("call_1", "London"),
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 12}'},
    {"role": "assistant", "content": "It is 12 degrees in London."},
    *QUESTION,
]


@pytest.fixture(scope="module")
def server():
    # compact JSON (", " and ": "): the small model otherwise spends tokens on whitespace
    args = "--model-path smollm2 --max-total-tokens 20000 --json-whitespace compact"
    s = SharedServer(*args.split())
    yield s.up()
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def ask(client, messages=QUESTION, **kw):
    kw = {"max_tokens": 48, "temperature": 0, "tools": TOOLS, **kw}
    return client.chat.completions.create(model="default", messages=messages, **kw)


def checked_calls(choice) -> list[tuple[str, dict]]:
    """(name, arguments) of a choice's calls, each checked against its tool's schema."""
    calls = []
    for call in choice.message.tool_calls or []:
        assert call.type == "function" and call.id.startswith("call_") and len(call.id) == 29
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        calls.append((call.function.name, arguments))
    return calls


def streamed(client, messages=QUESTION, **kw) -> tuple[str | None, list, list[str]]:
    """(content, [(name, arguments)], finish reasons) reassembled from a stream's deltas."""
    content, calls, ids, finishes = "", {}, {}, []
    for chunk in ask(client, messages, stream=True, **kw):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                if part.id is not None:  # the first delta of a call: id, type, name
                    assert part.index not in ids and part.type == "function"
                    assert part.function.arguments == ""
                    ids[part.index] = part.id
                    calls[part.index] = [part.function.name, ""]
                else:
                    calls[part.index][1] += part.function.arguments
            if choice.finish_reason is not None:
                finishes.append(choice.finish_reason)
    assert sorted(calls) == list(range(len(calls)))
    pairs = [(name, json.loads(arguments)) for name, arguments in calls.values()]
    return content or None, pairs, finishes


@pytest.fixture(scope="module")
def parallel_reply(client):
    return ask(client, tool_choice="required")


@pytest.fixture(scope="module")
def auto_call_reply(client):
    return ask(client, EARLIER_CALL)


def test_required_gives_one_valid_call_per_choice(client):
    reply = ask(
        client, tool_choice="required", parallel_tool_calls=False, n=2, temperature=0.8, seed=3
    )
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert len(checked_calls(choice)) == 1
    assert reply.usage.completion_tokens >= 2


def test_named_function_is_the_one_called(client):
    choice = ask(client, tool_choice={"type": "function", "function": {"name": "calculate"}})
    calls = checked_calls(choice.choices[0])
    assert [name for name, _ in calls] == ["calculate"]


def test_required_parallel_gives_a_list_of_valid_calls(parallel_reply):
    choice = parallel_reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(checked_calls(choice)) >= 1


def test_stream_reassembles_to_the_same_calls(client, parallel_reply):
    content, calls, finishes = streamed(client, tool_choice="required")
    assert content is None and finishes == ["tool_calls"]
    assert calls == checked_calls(parallel_reply.choices[0])
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMAS[name])


def test_auto_answers_a_greeting_in_text(client):
    choice = ask(client, [{"role": "user", "content": "Hi!"}], max_tokens=12).choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content and "<tool_call>" not in choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_auto_calls_a_tool_after_an_earlier_call(auto_call_reply):
    """The request also carries an assistant tool_calls message and a tool result."""
    choice = auto_call_reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [name for name, _ in checked_calls(choice)] == ["get_weather"]


def test_auto_stream_matches(client, auto_call_reply):
    content, calls, finishes = streamed(client, EARLIER_CALL)
    choice = auto_call_reply.choices[0]
    assert (content, calls) == (choice.message.content, checked_calls(choice))
    assert finishes == ["tool_calls"]


def test_answer_uses_the_tool_result(client):
    messages = [
        *QUESTION,
        weather_call("call_9", "Paris"),
        {"role": "tool", "tool_call_id": "call_9", "content": '{"temperature_celsius": 31}'},
    ]
    choice = ask(client, messages, tool_choice="none", max_tokens=24).choices[0]
    assert choice.message.tool_calls is None
    assert "31" in choice.message.content


def _tool(name="f", parameters=None) -> dict:
    fn = {"name": name, "parameters": parameters or {"type": "object"}}
    return {"type": "function", "function": fn}


UNIQUE = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
BAD_REQUESTS = {
    "bad name": ({"tools": [_tool("get weather!")]}, "tools", "name"),
    "duplicate names": ({"tools": [_tool("f"), _tool("f")]}, "tools", "unique"),
    "non-object parameters": ({"tools": [_tool("f", {"type": "string"})]}, "tools", "object"),
    "unsupported schema (required)": (
        {"tools": [WEATHER, _tool("tagger", UNIQUE)], "tool_choice": "required"},
        "tools",
        "'tagger'",
    ),
    "unsupported schema (auto)": ({"tools": [_tool("tagger", UNIQUE)]}, "tools", "'tagger'"),
    "named choice not in tools": (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tool_choice",
        "nope",
    ),
    "tool_choice without tools": ({"tool_choice": "required"}, "tool_choice", "tools"),
    "unknown tool_choice": ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", "always"),
    "tools with response_format": (
        {"tools": TOOLS, "response_format": {"type": "json_object"}},
        "response_format",
        "tools",
    ),
    "bad tool_calls message": (
        {"messages": [*QUESTION, {"role": "assistant", "tool_calls": [{"id": "x"}]}]},
        "messages",
        "tool_calls",
    ),
    "tool message without id": (
        {"messages": [*QUESTION, {"role": "tool", "content": "1"}]},
        "messages",
        "tool_call_id",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_tool_requests_are_400(server, case):
    fields, param, named = BAD_REQUESTS[case]
    body = {"model": "default", "messages": QUESTION, "max_tokens": 4, **fields}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and named in error["message"], error


def test_server_serves_after_bad_requests(server):
    body = {"model": "default", "messages": QUESTION, "max_tokens": 2, "tools": TOOLS}
    assert server.post("/v1/chat/completions", {**body, "tool_choice": "bogus"}).status_code == 400
    r = server.post("/v1/chat/completions", {**body, "tool_choice": "none"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_example_tool_loop_runs(server):
    example = os.path.join(ROOT, "examples", "tool_calls.py")
    out = subprocess.run(
        [sys.executable, example, "--base-url", f"{server.url}/v1", "--max-tokens", "24"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("user: ")
    assert lines[1].startswith(("tool call: get_weather(", "tool call: calculate("))
    assert lines[-1].startswith("assistant: ") and len(lines[-1]) > len("assistant: ")
