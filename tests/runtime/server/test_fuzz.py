"""Fuzzing the HTTP API of a real server: request bodies built by hypothesis from valid fields
mixed with hostile values (huge, tiny and negative numbers, NaN and infinity as big literals,
wrong types, bad unicode, unknown fields, deep nesting, large strings) must never get a 5xx,
and the server must be healthy, its KV pool whole, afterwards.

Bounded and reproducible: a fixed number of examples per endpoint, derandomized, no shrinking
(a shrink would replay bodies against a server that one of them may have taken down).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.runtime.server_helpers import ServerProcess

CONTEXT = 64  # a clamped max_new_tokens (10**9 is valid) runs into the context in seconds
EXAMPLES = 60  # per endpoint: about a minute for the three on this machine


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(
        "--model-path", "smollm2", "--max-total-tokens", "8192", "--context-length", str(CONTEXT)
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


class Raw:
    """JSON text written as is: literals Python's json module would not write (1e999, NaN)
    and nesting too deep to build as Python objects."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:60]!r}{'...' if len(self.text) > 60 else ''})"


def encode(value) -> str:
    """JSON text of `value`; strings keep their lone surrogates as \\ud800-style escapes."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    return json.dumps(value)


# ---- hostile values ----------------------------------------------------------------------

EDGE_INTS = st.sampled_from(
    [0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**9, 10**30]
)
BIG_LITERALS = st.sampled_from(
    ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1e-400", "-0.0", "4.9e-324", "1" * 400]
).map(Raw)
BAD_STRINGS = st.sampled_from(
    [
        "",
        "\ud800",
        "a\udfffb",
        "\x00",
        "\ufeff",
        "\U0010ffff",
        "x" * 1025,
        "é" * 5000,
        "word " * 40_000,
        "<|im_start|>",
        "%import .secret (X)",
    ]
)
DEEP = st.sampled_from([100, 1_000, 5_000, 100_000]).map(lambda d: Raw("[" * d + "]" * d))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    EDGE_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-300, max_value=1e-300),
    BIG_LITERALS,
    st.text(max_size=8),
    BAD_STRINGS,
)
HOSTILE = st.one_of(
    SCALARS,
    DEEP,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(st.text(max_size=6), SCALARS, max_size=3),
)

# ---- valid values ------------------------------------------------------------------------

VALID_SAMPLING = {
    "max_new_tokens": st.integers(0, 4),
    "min_new_tokens": st.integers(0, 1),
    "temperature": st.sampled_from([0, 0.5, 1.0, 1e-40]),
    "top_p": st.sampled_from([0.5, 1.0]),
    "top_k": st.sampled_from([-1, 1, 20, 10**6]),
    "min_p": st.sampled_from([0.0, 0.1]),
    "frequency_penalty": st.sampled_from([0.0, 1.5]),
    "presence_penalty": st.sampled_from([0.0, -1.0]),
    "repetition_penalty": st.sampled_from([1.0, 1e-300, 2.0]),
    "stop": st.one_of(st.just("\n"), st.lists(st.sampled_from([".", "!", "the"]), max_size=3)),
    "stop_token_ids": st.lists(st.integers(0, 49151), max_size=2),
    "ignore_eos": st.booleans(),
    "skip_special_tokens": st.booleans(),
    "no_stop_trim": st.booleans(),
    "n": st.integers(1, 2),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "regex": st.just("[a-z]{1,3}"),
    "json_schema": st.just('{"type": "integer"}'),
    "ebnf": st.just('start: "yes" | "no"'),
    "structural_tag": st.just(
        {
            "structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}],
            "triggers": ["<a>"],
        }
    ),
    "logit_bias": st.dictionaries(st.integers(0, 49151).map(str), st.floats(-100, 100), max_size=3),
}
VALID_GENERATE = {
    "return_logprob": st.booleans(),
    "logprob_start_len": st.sampled_from([-1, 0]),
    "top_logprobs_num": st.integers(0, 2),
    "return_text_in_logprobs": st.booleans(),
    "stream": st.booleans(),
    "rid": st.uuids().map(str),
}
VALID_OPENAI = {
    "temperature": st.sampled_from([0, 0.7]),
    "top_p": st.sampled_from([0.9, 1.0]),
    "n": st.integers(1, 2),
    "stream": st.booleans(),
    "stop": st.one_of(st.just("\n"), st.lists(st.sampled_from([".", "!"]), max_size=2)),
    "presence_penalty": st.sampled_from([0.0, 0.5]),
    "frequency_penalty": st.sampled_from([0.0, 0.5]),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "user": st.text(max_size=5),
    "top_k": st.sampled_from([-1, 5]),
    "min_p": st.sampled_from([0.0, 0.05]),
    "repetition_penalty": st.sampled_from([1.0, 1.2]),
    "ignore_eos": st.booleans(),
    "stop_token_ids": st.lists(st.integers(0, 49151), max_size=2),
}
PROMPT_TEXT = st.one_of(
    st.sampled_from(["hi", "The capital of France is", "1, 2, 3,"]),
    st.text(min_size=1, max_size=30),
)
PROMPT_IDS = st.lists(st.integers(0, 49151), min_size=1, max_size=12)
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant"]),
            "content": st.one_of(
                PROMPT_TEXT,
                st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": PROMPT_TEXT}),
                    max_size=2,
                ),
            ),
        }
    ),
    min_size=1,
    max_size=3,
)


def spoil(draw, body: dict, keys: list[str]) -> None:
    """Give none (one time in four), one or two of `keys` (or an unknown field) a hostile value."""
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        key = draw(st.sampled_from([*keys, "unknown_field"]))
        body[key] = draw(HOSTILE)


@st.composite
def generate_bodies(draw) -> dict:
    params = draw(st.fixed_dictionaries({}, optional=VALID_SAMPLING))
    constraints = [k for k in ("regex", "json_schema", "ebnf", "structural_tag") if k in params]
    for extra in constraints[1:]:  # one constraint at a time, or the body is simply invalid
        del params[extra]
    if params.get("min_new_tokens", 0) > params.get("max_new_tokens", 2):
        params["min_new_tokens"] = 0
    params.setdefault("max_new_tokens", draw(st.integers(0, 4)))
    body = draw(st.fixed_dictionaries({}, optional=VALID_GENERATE))
    if draw(st.booleans()):
        body["text"] = draw(st.one_of(PROMPT_TEXT, st.lists(PROMPT_TEXT, min_size=1, max_size=2)))
    else:
        body["input_ids"] = draw(
            st.one_of(PROMPT_IDS, st.lists(PROMPT_IDS, min_size=1, max_size=2))
        )
    spoil(draw, params, list(VALID_SAMPLING))
    body["sampling_params"] = params
    spoil(draw, body, [*VALID_GENERATE, "text", "input_ids", "sampling_params"])
    return body


@st.composite
def completion_bodies(draw) -> dict:
    body = draw(st.fixed_dictionaries({}, optional=VALID_OPENAI))
    body["model"] = "smollm2"
    body["max_tokens"] = draw(st.integers(0, 4))
    body["prompt"] = draw(
        st.one_of(PROMPT_TEXT, st.lists(PROMPT_TEXT, min_size=1, max_size=2), PROMPT_IDS)
    )
    if draw(st.booleans()):
        body["echo"] = draw(st.booleans())
        body["logprobs"] = draw(st.integers(0, 3))
    spoil(
        draw, body, [*VALID_OPENAI, "model", "max_tokens", "prompt", "echo", "logprobs", "suffix"]
    )
    return body


@st.composite
def chat_bodies(draw) -> dict:
    body = draw(st.fixed_dictionaries({}, optional=VALID_OPENAI))
    body["model"] = "smollm2"
    body[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = draw(st.integers(0, 4))
    body["messages"] = draw(MESSAGES)
    if draw(st.booleans()):
        body["logprobs"] = True
        body["top_logprobs"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        body["response_format"] = draw(
            st.sampled_from(
                [
                    {"type": "text"},
                    {"type": "json_object"},
                    {
                        "type": "json_schema",
                        "json_schema": {"name": "n", "schema": {"type": "integer"}},
                    },
                ]
            )
        )
    keys = [
        *VALID_OPENAI,
        "model",
        "max_tokens",
        "messages",
        "logprobs",
        "top_logprobs",
        "response_format",
    ]
    spoil(draw, body, keys)
    if draw(st.integers(0, 3)) == 0:  # spoil inside a message
        message = body["messages"][0] if isinstance(body.get("messages"), list) else None
        if isinstance(message, dict):
            message[draw(st.sampled_from(["content", "role", "name"]))] = draw(HOSTILE)
    return body


GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"[]",
            b"null",
            b"5",
            b'"text"',
            b"{",
            b'{"text": "hi"',
            b"\xef\xbb\xbf{}",
            b'{"text": "\xff"}',
        ]
    ),
)


def bodies(structured) -> st.SearchStrategy[bytes]:
    """Structured bodies, and one time in ten bytes that are no JSON object at all."""
    encoded = structured.map(lambda body: encode(body).encode())
    return st.integers(0, 9).flatmap(lambda i: GARBAGE if i == 0 else encoded)


def check(client: httpx.Client, path: str, body: bytes) -> None:
    try:
        r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    except httpx.HTTPError as e:
        pytest.fail(f"{path}: no answer ({type(e).__name__}: {e}) to {body[:300]!r}")
    assert r.status_code in (200, 400), f"{path}: {r.status_code} {r.text[:300]} for {body[:300]!r}"
    if r.status_code == 400:
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], err


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)


@FUZZ
@given(body=bodies(generate_bodies()))
def test_fuzz_generate(client, body):
    check(client, "/generate", body)


@FUZZ
@given(body=bodies(completion_bodies()))
def test_fuzz_completions(client, body):
    check(client, "/v1/completions", body)


@FUZZ
@given(body=bodies(chat_bodies()))
def test_fuzz_chat_completions(client, body):
    check(client, "/v1/chat/completions", body)


def test_server_is_healthy_after_the_fuzzing(server, client):
    assert server.proc.poll() is None
    assert client.get("/health").status_code == 200
    r = client.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] >= 1
    deadline = time.time() + 30
    while time.time() < deadline:
        s = client.get("/get_server_info").json()["stats"]
        if s["running"] == 0 and s["waiting"] == 0:
            break
        time.sleep(0.2)
    assert s["kv_free"] + s["tree_tokens"] == s["kv_pool_size"], s
