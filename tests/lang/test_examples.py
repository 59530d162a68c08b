"""Every example in examples/ runs against the real server and produces what it promises."""

import importlib.util
import json
import pathlib

import jsonschema
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def react():
    return load("react_agent")


def test_react_agent_tool_calls_follow_the_schema_and_the_tool_computes(backend, react):
    state = react.main(backend.base_url, "What is 17 * 23?", max_steps=1)
    calls = [json.loads(state["call_0"])]
    assert calls, state.text()
    for call in calls:
        jsonschema.validate(call, react.TOOL_CALL)
    for message in state.messages():
        if message["content"].startswith("Observation: "):
            expression = next(c["input"] for c in calls if c["tool"] == "calculator")
            assert message["content"] == f"Observation: {react.calculator(expression)}"
    assert isinstance(state.ret_value, str)


def test_react_agent_calculator_is_plain_python(react):
    assert react.calculator("17 * 23") == "391"
    assert react.calculator("(4 + 5) / 2") == "4.5"
    assert react.calculator("__import__('os')").startswith("error:")


def test_multi_turn_chat_keeps_the_conversation(backend):
    state = load("multi_turn_chat").main(backend.base_url, ["Hi!", "Who are you?"], max_tokens=8)
    roles = [m["role"] for m in state.messages()]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert state.messages()[3]["content"] == "Who are you?"
    assert state.messages()[4]["content"] == state["answer_1"].strip()


def test_fork_brainstorm_branches_share_the_prefix(backend):
    state = load("fork_brainstorm").main(backend.base_url, "a smart garden", 2, max_tokens=8)
    assert len(state["idea"]) == 2
    assert state["best"] in ("1", "2")
    assert all(meta["cached_tokens"] > 30 for meta in state.get_meta_info("idea"))


def test_json_extraction_returns_schema_valid_data(backend):
    module = load("json_extraction")
    data = module.main(backend.base_url)
    jsonschema.validate(data, module.INVOICE)


def test_batch_job_classifies_every_input_in_order(backend):
    module = load("batch_job")
    reviews = module.REVIEWS[:3]
    states = module.main(backend.base_url, reviews, threads=3, max_tokens=6)
    assert len(states) == 3
    for review, state in zip(reviews, states):
        assert review in state.text()
        assert state["sentiment"] in ("positive", "negative", "neutral")
