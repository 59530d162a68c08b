"""What an operator sets up and a newcomer copies: --served-model-name, --chat-template,
--tokenizer-path, /tokenize, /detokenize, /version, the request schemas in /docs, and the
runtime's examples (run against the same server, which saves a start)."""

import importlib.util
import ipaddress
import json
import os
import pathlib
import re
import subprocess
import tempfile
import time

import httpx
import jinja2
import jsonschema
import lark
import pytest
from openai import BadRequestError, OpenAI

from runtime import Engine
from runtime.model.loader import (
    copy_tokenizer_files,
    load_tokenizer,
    read_chat_template,
    resolve_model_path,
)
from runtime.version import version
from tests.runtime.server_helpers import ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "tests" / "data" / "plain_chat_template.jinja"
NAME = "shop-assistant"


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """A folder with only the model's tokenizer files (no config.json, no weights)."""
    folder = tmp_path_factory.mktemp("tokenizer")
    copy_tokenizer_files(resolve_model_path("smollm2"), str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def stale_ipc_dir():
    """The ipc folder a server killed by SIGKILL left behind (its pid is gone)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = os.path.join(tempfile.gettempdir(), f"radixgen-ipc-{dead.pid}-left")
    os.makedirs(folder)
    open(os.path.join(folder, "scheduler"), "w").close()
    an_hour_ago = time.time() - 3600
    os.utime(folder, (an_hour_ago, an_hour_ago))
    return folder


@pytest.fixture(scope="module")
def server(tokenizer_folder, stale_ipc_dir):
    proc = ServerProcess(
        *("--max-total-tokens", "8192", "--served-model-name", NAME, "--cpu-threads", "1"),
        *("--chat-template", str(TEMPLATE), "--tokenizer-path", tokenizer_folder),
        "--enable-deterministic-inference",  # seeded samples repeat whatever the batching
    )
    yield proc
    proc.stop()


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_served_model_name_is_the_only_name(server):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="x")
    assert [m.id for m in client.models.list().data] == [NAME]
    out = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert out.model == NAME
    with pytest.raises(BadRequestError, match=NAME):
        client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )


def test_model_info_names_the_tokenizer_and_template(server, tokenizer_folder):
    info = httpx.get(f"{server.url}/get_model_info", timeout=10).json()
    assert info["served_model_name"] == NAME
    assert info["tokenizer_path"] == tokenizer_folder
    assert info["chat_template"] == TEMPLATE.read_text()


def test_chat_prompts_use_the_given_template(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = jinja2.Template(TEMPLATE.read_text()).render(
        messages=messages, add_generation_prompt=True
    )
    assert rendered.endswith("[assistant]")
    counted = post(server, "/tokenize", {"prompt": rendered}).json()["count"]
    out = post(
        server, "/v1/chat/completions", {"model": NAME, "messages": messages, "max_tokens": 1}
    ).json()
    assert out["usage"]["prompt_tokens"] == counted


def test_tokenize_and_detokenize_round_trip(server, tokenizer_folder):
    tok = load_tokenizer(tokenizer_folder)
    one = post(server, "/tokenize", {"prompt": "Hello, world!"}).json()
    assert one["tokens"] == tok.encode("Hello, world!")
    assert one["count"] == len(one["tokens"]) and one["max_model_len"] > 0
    batch = post(server, "/v1/tokenize", {"model": NAME, "prompt": ["a b", "c"]}).json()
    assert batch["tokens"] == [tok.encode("a b"), tok.encode("c")]
    assert batch["count"] == [len(t) for t in batch["tokens"]]
    back = post(server, "/detokenize", {"tokens": one["tokens"]}).json()
    assert back["text"] == "Hello, world!"
    both = post(server, "/v1/detokenize", {"tokens": batch["tokens"]}).json()
    assert both["text"] == ["a b", "c"]


@pytest.mark.parametrize(
    "path, body, word",
    [
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
        ("/tokenize", {"prompt": "x", "model": "other"}, "model"),
        ("/tokenize", {"prompt": "x", "extra": 1}, "extra"),
        ("/detokenize", {"tokens": [10**9]}, "tokens"),
        ("/detokenize", {"tokens": ["1"]}, "tokens"),
        ("/detokenize", {}, "tokens"),
    ],
)
def test_tokenizer_endpoints_refuse_bad_input(server, path, body, word):
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    assert word in r.json()["error"]["message"]


def test_a_starting_server_removes_ipc_folders_of_dead_servers(server, stale_ipc_dir):
    assert not os.path.exists(stale_ipc_dir)
    own = re.search(r"ipc sockets in (\S+)", server.output()).group(1)
    assert os.path.basename(own).startswith(f"radixgen-ipc-{server.proc.pid}-")
    assert os.path.isdir(own)


def test_version(server):
    assert httpx.get(f"{server.url}/version", timeout=10).json() == {"version": version()}


def test_docs_show_the_request_schemas(server):
    doc = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    schemas = doc["components"]["schemas"]

    def body_of(path):
        ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return schemas[ref["$ref"].rsplit("/", 1)[1]]

    generate = body_of("/generate")
    assert {"text", "input_ids", "sampling_params", "stream", "rid"} <= set(generate["properties"])
    sampling = schemas["SamplingParams"]["properties"]
    assert sampling["max_new_tokens"]["default"] == 128
    assert {"json_schema", "regex", "ebnf", "temperature", "stop"} <= set(sampling)
    assert {"messages", "model", "tools", "response_format"} <= set(
        body_of("/v1/chat/completions")["properties"]
    )
    assert "prompt" in body_of("/tokenize")["properties"]
    assert httpx.get(f"{server.url}/docs", timeout=10).status_code == 200


# ---- examples ------------------------------------------------------------------------------


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openai_client_example_streams_the_same_reply(server):
    text, pieces = example("openai_client").main(server.url, max_tokens=12)
    assert text and len(pieces) > 1
    assert "".join(pieces) == text


def test_structured_output_example_always_parses(server):
    module = example("structured_output")
    out = module.main(server.url, max_tokens=64)
    jsonschema.validate(out["city"], module.CITY)
    ipaddress.IPv4Address(out["ip"])  # raises unless a valid address
    assert re.fullmatch(module.IPV4, out["ip"])
    lark.Lark(module.EQUATION).parse(out["expression"])


def test_prefix_caching_example_reports_cached_turns(server):
    module = example("prefix_caching")
    out = module.main(server.url, module.QUESTIONS[:2], max_tokens=4, rules=6)
    turns = out["turns"]
    assert turns[0]["cached"] == 0  # right after a flush
    for before, turn in zip(turns, turns[1:]):
        assert turn["cached"] >= before["prompt"] - 2  # the whole earlier conversation
        assert turn["prompt"] > before["prompt"]
    assert out["cold_s"] > 0 and out["warm_s"] > 0


def test_offline_batch_example_labels_every_review(capsys):
    module = example("offline_batch")
    engine = Engine(model_path="smollm2", log_level="warning", cpu_threads=1)
    try:
        labels = module.main(module.REVIEWS[:5], chunk=2, engine=engine)
    finally:
        engine.shutdown()
    assert len(labels) == 5 and set(labels) <= set(module.LABELS)
    printed = capsys.readouterr()
    assert "classifying" in printed.err  # the progress bar
    assert all(review in printed.out for review in module.REVIEWS[:5])


def test_seeded_samples_of_one_prompt_differ_and_repeat(server):
    body = {
        "text": "Once upon a time",
        "sampling_params": {"n": 2, "seed": 1, "temperature": 1.0, "max_new_tokens": 8},
    }
    first = [o["text"] for o in post(server, "/generate", body).json()]
    again = [o["text"] for o in post(server, "/generate", body).json()]
    assert first == again
    assert first[0] != first[1]
    chat = {
        "model": NAME,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "n": 2,
        "seed": 1,
        "temperature": 1.0,
        "max_tokens": 8,
    }
    out = post(server, "/v1/chat/completions", chat).json()
    texts = [c["message"]["content"] for c in out["choices"]]
    assert texts[0] != texts[1]
    once = post(server, "/v1/chat/completions", {**chat, "n": 1}).json()["usage"]
    assert out["usage"]["prompt_tokens"] == once["prompt_tokens"]  # the prompt counted once


@pytest.mark.parametrize("stream", [False, True])
def test_completion_usage_counts_every_prompt_once(server, stream):
    prompts = ["The sky is", "Two plus two is four, and three plus"]
    counts = post(server, "/tokenize", {"prompt": prompts}).json()["count"]
    body = {"model": NAME, "prompt": prompts, "n": 2, "max_tokens": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
        usage = json.loads(events[-1])["usage"]
    else:
        usage = post(server, "/v1/completions", body).json()["usage"]
    assert usage["prompt_tokens"] == sum(counts)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_json_schema_error_names_the_field_used(server):
    bad = {"type": "array", "uniqueItems": True}
    base = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = post(server, "/v1/chat/completions", {**base, "json_schema": bad})
    assert r.status_code == 400 and r.json()["error"]["param"] == "json_schema", r.text
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "schema": bad}}
    r = post(server, "/v1/chat/completions", {**base, "response_format": wrapped})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text


@pytest.mark.parametrize("content", ['{"chat_template": 5}', '["a"]', "{}", "not json"])
def test_a_json_chat_template_needs_a_string(tmp_path, content):
    path = tmp_path / "template.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="chat_template string"):
        read_chat_template(str(path))
