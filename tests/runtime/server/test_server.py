"""A real server subprocess with SmolLM2, driven by the openai client and by httpx."""

import asyncio
import json
import time

import httpx
import pytest

from tests.runtime.server_helpers import ServerProcess


@pytest.fixture(scope="module")
def server():
    s = ServerProcess("--model-path", "smollm2", "--max-total-tokens", "20000")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def stats(server) -> dict:
    return httpx.get(f"{server.url}/get_server_info").json()["stats"]


def wait_idle(server, timeout=30) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = stats(server)
        if s.get("running") == 0 and s.get("waiting") == 0:
            return s
        time.sleep(0.2)
    raise AssertionError(f"server still busy: {stats(server)}")


CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def test_models_and_model_info(server, client):
    assert client.models.list().data[0].id == "smollm2"
    info = httpx.get(f"{server.url}/get_model_info").json()
    assert info["vocab_size"] == 49152 and info["context_length"] == 8192
    assert "<|im_start|>" in info["chat_template"]


def test_chat_completion_and_cached_tokens(client):
    first = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=16, temperature=0
    )
    assert "Paris" in first.choices[0].message.content
    assert first.choices[0].finish_reason in ("stop", "length")
    assert first.usage.completion_tokens > 0 and first.usage.prompt_tokens > 10
    again = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=16, temperature=0
    )
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 10


def test_chat_response_format_json_schema_and_json_object(server, client):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"enum": ["France", "Germany", "Spain"]},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    out = client.chat.completions.create(
        model="smollm2",
        messages=CHAT,
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    doc = json.loads(out.choices[0].message.content)
    assert (
        set(doc) == {"city", "country"}
        and doc["country"] in schema["properties"]["country"]["enum"]
    )
    ask = [{"role": "user", "content": 'Reply with JSON like {"capital": "..."} for France.'}]
    out = client.chat.completions.create(
        model="smollm2",
        messages=ask,
        max_tokens=120,
        temperature=0,
        response_format={"type": "json_object"},
    )
    text = out.choices[0].message.content
    assert text.lstrip().startswith("{")
    if out.choices[0].finish_reason == "stop":  # a small model may ramble past max_tokens
        assert isinstance(json.loads(text), dict)
    r = httpx.post(
        f"{server.url}/generate",
        json={"text": "Count: ", "sampling_params": {"max_new_tokens": 12, "regex": "[0-9]{3}"}},
    )
    assert r.status_code == 200 and len(r.json()["text"]) == 3 and r.json()["text"].isdigit()


def test_chat_streaming_matches_and_reports_usage(client):
    full = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=20, temperature=0
    )
    stream = client.chat.completions.create(
        model="smollm2",
        messages=CHAT,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens


def test_completion_n_stop_and_logprobs(client, server):
    out = client.completions.create(
        model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0
    )
    native = httpx.post(
        f"{server.url}/generate",
        json={
            "text": "The capital of France is",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        },
    ).json()
    assert out.choices[0].text == native["text"]
    two = client.completions.create(
        model="smollm2", prompt="Once upon a time", max_tokens=8, n=2, temperature=1.0
    )
    assert len(two.choices) == 2 and {c.index for c in two.choices} == {0, 1}
    word = native["text"].split()[1]
    stopped = client.completions.create(
        model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0, stop=[word]
    )
    assert word not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"
    lp = client.completions.create(
        model="smollm2",
        prompt="The capital of France is",
        max_tokens=4,
        temperature=0,
        logprobs=3,
        echo=True,
    )
    data = lp.choices[0].logprobs
    assert lp.choices[0].text.startswith("The capital of France is")
    assert data.token_logprobs[0] is None and len(data.tokens) == 5 + 4
    assert all(len(t) == 3 for t in data.top_logprobs[1:])


def test_chat_logprobs(client):
    out = client.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-4)


def test_native_batch_stream_and_logprobs(server):
    outs = httpx.post(
        f"{server.url}/generate",
        json={
            "text": ["Hello", "The sky is"],
            "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "return_logprob": True,
            "top_logprobs_num": 2,
            "return_text_in_logprobs": True,
        },
        timeout=60,
    ).json()
    assert len(outs) == 2
    for o in outs:
        assert len(o["meta_info"]["output_token_logprobs"]) == 4
        assert isinstance(o["meta_info"]["output_token_logprobs"][0][2], str)
    ids = httpx.post(
        f"{server.url}/generate",
        json={"input_ids": [[1, 2, 3], [4, 5, 6]], "sampling_params": {"max_new_tokens": 2}},
    ).json()
    assert [o["meta_info"]["prompt_tokens"] for o in ids] == [3, 3]
    chunks = []
    with httpx.stream(
        "POST",
        f"{server.url}/generate",
        json={
            "text": "Count: one, two,",
            "sampling_params": {"max_new_tokens": 12, "temperature": 0},
            "stream": True,
        },
        timeout=60,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    bodies = [json.loads(c) for c in chunks[:-1]]
    assert bodies[-1]["meta_info"]["finish_reason"] is not None
    texts = [b["text"] for b in bodies]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative text


def test_abort_request_by_rid(server):
    async def main():
        async with httpx.AsyncClient(timeout=60) as c:
            task = asyncio.create_task(
                c.post(
                    f"{server.url}/generate",
                    json={
                        "text": "Write a long story.",
                        "rid": "to-abort",
                        "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
                    },
                )
            )
            await asyncio.sleep(1.5)
            await c.post(f"{server.url}/abort_request", json={"rid": "to-abort"})
            return await task

    resp = asyncio.run(main())
    assert resp.json()["meta_info"]["finish_reason"]["type"] == "abort"
    s = wait_idle(server)
    assert s["kv_free"] + s["tree_tokens"] == s["kv_pool_size"]


def test_32_concurrent_streams_then_pool_is_whole(server):
    async def one(c, i):
        text, done = "", False
        async with c.stream(
            "POST",
            f"{server.url}/generate",
            json={
                "text": f"Question {i}: name a color.",
                "stream": True,
                "sampling_params": {"max_new_tokens": 16, "temperature": 0.7, "seed": i},
            },
        ) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    text = json.loads(line[6:])["text"]
        return done, text

    async def main():
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*(one(c, i) for i in range(32)))

    results = asyncio.run(main())
    assert all(done for done, _ in results)
    s = wait_idle(server)
    assert s["kv_free"] + s["tree_tokens"] == s["kv_pool_size"] and s["protected"] == 0


def test_disconnect_mid_stream_aborts(server):
    before = stats(server)["aborted_requests"]
    with httpx.stream(
        "POST",
        f"{server.url}/generate",
        json={
            "text": "Tell me everything about the ocean.",
            "stream": True,
            "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True},
        },
        timeout=60,
    ) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n > 4:
                break
    deadline = time.time() + 20
    while time.time() < deadline and stats(server)["aborted_requests"] == before:
        time.sleep(0.3)
    assert stats(server)["aborted_requests"] > before
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "radixgen_aborted_requests_total" in metrics
    s = wait_idle(server)
    assert s["kv_free"] + s["tree_tokens"] == s["kv_pool_size"]


BAD = [
    ("/generate", b"{not json", "JSON"),
    ("/generate", {"text": "hi", "bogus": 1}, "bogus"),
    ("/generate", {"text": 5}, "text"),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": -1}}, "temperature"),
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 2}}, "top_p"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": -3}}, "max_new_tokens"),
    ("/generate", {"text": ""}, "empty"),
    ("/generate", {"input_ids": [5] * 9000}, "context"),
    ("/generate", {"input_ids": [1, 99999999]}, "input_ids"),
    ("/generate", {"text": "hi", "sampling_params": {"regex": "[0-9"}}, "regex"),
    ("/generate", {"text": "hi", "sampling_params": {"json_schema": '{"not": {}}'}}, "json_schema"),
    ("/v1/completions", {"model": "nope", "prompt": "hi"}, "model"),
    ("/v1/completions", {"model": "smollm2", "prompt": ""}, "prompt"),
    ("/v1/completions", {"model": "smollm2", "prompt": "hi", "temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {"model": "smollm2", "messages": []}, "messages"),
    (
        "/v1/chat/completions",
        {"model": "smollm2", "messages": CHAT, "max_tokens": -1},
        "max_tokens",
    ),
    (
        "/v1/chat/completions",
        {"model": "smollm2", "messages": CHAT, "response_format": {"type": "xml"}},
        "response_format",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "smollm2",
            "messages": CHAT,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}},
            },
        },
        "response_format",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "smollm2",
            "messages": CHAT,
            "tools": [{"type": "function", "function": {"name": "bad name"}}],
        },
        "tools",
    ),
    (
        "/v1/chat/completions",
        {"model": "smollm2", "messages": [{"role": "wizard", "content": "x"}]},
        "role",
    ),
]


@pytest.mark.parametrize("path, body, word", BAD)
def test_bad_input_gets_400(server, path, body, word):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(f"{server.url}{path}", timeout=30, **kw)
    assert r.status_code == 400, r.text
    assert word.lower() in r.json()["error"]["message"].lower()
    ok = httpx.post(
        f"{server.url}/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 1}}
    )
    assert ok.status_code == 200


def test_flush_cache_and_health_generate(server):
    wait_idle(server)
    assert httpx.get(f"{server.url}/health_generate", timeout=60).status_code == 200
    wait_idle(server)
    assert httpx.post(f"{server.url}/flush_cache").status_code == 200
    s = stats(server)
    assert s["tree_tokens"] == 0 and s["kv_free"] == s["kv_pool_size"]


def test_api_key():
    s = ServerProcess(
        "--model-path", "smollm2", "--max-total-tokens", "2048", "--api-key", "sekret"
    )
    try:
        assert httpx.get(f"{s.url}/health").status_code == 200
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 1}}
        assert httpx.post(f"{s.url}/generate", json=body).status_code == 401
        assert (
            httpx.get(f"{s.url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code
            == 401
        )
        ok = httpx.post(f"{s.url}/generate", json=body, headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200
    finally:
        s.stop()
