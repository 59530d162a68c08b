"""The OpenAI backend against our own /v1."""

import json

import numpy as np
import pytest

import lang as sgl


@pytest.fixture
def openai_backend(backend) -> sgl.OpenAI:
    return sgl.OpenAI("smollm2", base_url=backend.base_url + "/v1", api_key="unused")


@sgl.function
def chat(s, question, schema=None):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", json_schema=schema))  # run(max_new_tokens=...)


def test_openai_backend_runs_chat_programs(openai_backend):
    state = chat.run(
        question="What is the capital of France?",
        backend=openai_backend,
        temperature=0,
        max_new_tokens=10,
    )
    assert "Paris" in state["answer"]
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant"]
    assert state.messages()[-1]["content"] == state["answer"].strip()
    meta = state.get_meta_info("answer")
    assert meta["prompt_tokens"] > 5 and 1 <= meta["completion_tokens"] <= 10

    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    state = chat.run(
        question="Is Paris in France? JSON.",
        schema=schema,
        backend=openai_backend,
        temperature=0,
        max_new_tokens=24,
    )
    assert isinstance(json.loads(state["answer"])["ok"], bool)

    streamed = chat.run(
        question="Say hi.", backend=openai_backend, stream=True, temperature=0, max_new_tokens=8
    )
    pieces = list(streamed.text_iter("answer"))
    assert len(pieces) > 1 and "".join(pieces) == streamed["answer"]


def test_openai_backend_names_what_it_cannot_do(openai_backend):
    @sgl.function
    def with_regex(s):
        s += sgl.user("An IP?") + sgl.assistant(sgl.gen("ip", regex=r"\d+", max_tokens=4))

    with pytest.raises(sgl.UnsupportedFeatureError, match="regex"):
        with_regex.run(backend=openai_backend)

    @sgl.function
    def prefilled(s):
        s += sgl.user("Hi") + sgl.assistant("Sure: " + sgl.gen("x", max_tokens=2))

    with pytest.raises(sgl.UnsupportedFeatureError, match="assistant message"):
        prefilled.run(backend=openai_backend)

    @sgl.function
    def choose(s, method):
        s += sgl.user("Yes or no?") + sgl.assistant(sgl.select("a", ["yes", "no"], 0.0, method))

    assert choose.run(method=sgl.token_length_normalized, backend=openai_backend)["a"] in (
        "yes",
        "no",
    )
    for method in (sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized):
        with pytest.raises(sgl.UnsupportedFeatureError, match=f"{method!r}.*chat.*logprobs"):
            choose.run(method=method, backend=openai_backend)


def test_openai_backend_completion_model(backend):
    completion = sgl.OpenAI(
        "smollm2", is_chat_model=False, base_url=backend.base_url + "/v1", api_key="unused"
    )

    @sgl.function
    def complete(s):
        s += "Q: What is the capital of France?\nA: The capital of France is"
        s += sgl.gen("city", max_tokens=3, stop="\n")

    state = complete.run(backend=completion, temperature=0)
    assert "Paris" in state["city"]
    assert state.text().endswith(state["city"])


CAPITAL = "Q: What is the capital of France?\nA: The capital of France is"
CITIES = [" Paris", " London", " a small village"]


@sgl.function
def capital(s, method):
    s += CAPITAL + sgl.select("city", CITIES, choices_method=method)


@pytest.mark.parametrize(
    "method",
    [
        sgl.token_length_normalized,
        sgl.greedy_token_selection,
        sgl.unconditional_likelihood_normalized,
    ],
    ids=repr,
)
def test_openai_completion_select_agrees_with_runtime_endpoint(backend, method):
    completion = sgl.OpenAI(
        "smollm2", is_chat_model=False, base_url=backend.base_url + "/v1", api_key="unused"
    )
    native = capital.run(method=method, backend=backend)
    through_v1 = capital.run(method=method, backend=completion)
    assert through_v1["city"] == native["city"]
    assert through_v1.text() == native.text() == CAPITAL + native["city"]
    ours, theirs = through_v1.get_meta_info("city"), native.get_meta_info("city")
    # the same tokens of each choice, scored alike (up to the float noise of batching)
    texts = [[entry[2] for entry in tokens] for tokens in theirs["input_token_logprobs"]]
    assert [[entry[2] for entry in tokens] for tokens in ours["input_token_logprobs"]] == texts
    for key in (
        "normalized_prompt_logprobs",
        "greedy_logprob_matrix",
        "normalized_unconditional_prompt_logprobs",
    ):
        assert (key in ours) == (key in theirs), key
        if key in theirs:
            assert np.asarray(ours[key]) == pytest.approx(np.asarray(theirs[key]), abs=0.05)
    assert ours["prompt_tokens"] == theirs["prompt_tokens"]


def test_module_level_server_helpers(backend):
    info = sgl.get_server_info()
    assert "stats" in info and info["server_args"]["model_path"] == "smollm2"
    sgl.flush_cache()
    assert sgl.get_server_info()["stats"]["tree_tokens"] == 0
