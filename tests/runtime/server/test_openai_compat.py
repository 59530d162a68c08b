"""OpenAI fields that SDKs and frameworks send: harmless ones are accepted, logit_bias works,
SGLang's constraint extras and chat_template_kwargs reach the request, through the official
client."""

import re

import httpx
import pytest
from openai import BadRequestError, OpenAI

from runtime.model.loader import load_tokenizer
from tests.runtime.server_helpers import ServerProcess

CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def client():
    proc = ServerProcess("--max-total-tokens", "4096")
    yield OpenAI(base_url=f"{proc.url}/v1", api_key="x"), proc
    proc.stop()


def test_harmless_fields_are_accepted(client):
    c, _ = client
    out = c.chat.completions.create(
        model="smollm2",
        messages=CHAT,
        max_tokens=3,
        store=False,
        metadata={"team": "a"},
        service_tier="auto",
        user="u-1",
        extra_body={"reasoning_effort": "low", "chat_template_kwargs": {"flavour": 1}},
    )
    assert out.choices[0].message.content is not None


def test_logit_bias_forces_a_token(client):
    c, proc = client
    info = httpx.get(f"{proc.url}/get_model_info", timeout=10).json()
    bang = load_tokenizer(info["model_folder"]).encode("!", add_special_tokens=False)[0]
    out = c.chat.completions.create(
        model="smollm2", messages=CHAT, max_tokens=4, logit_bias={str(bang): 100}
    )
    assert out.choices[0].message.content == "!!!!"
    with pytest.raises(BadRequestError, match="logit_bias"):
        c.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=2, logit_bias={"x": 1})
    with pytest.raises(BadRequestError, match="logit_bias"):
        c.chat.completions.create(
            model="smollm2", messages=CHAT, max_tokens=2, logit_bias={"5": 500}
        )


def test_sglang_constraint_extras_on_chat(client):
    c, _ = client
    out = c.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Pick a number."}],
        max_tokens=8,
        extra_body={"regex": "[0-9]{3}"},
    )
    assert re.fullmatch("[0-9]{3}", out.choices[0].message.content)
    with pytest.raises(BadRequestError, match="one constraint"):
        c.chat.completions.create(
            model="smollm2",
            messages=CHAT,
            max_tokens=2,
            response_format={"type": "json_object"},
            extra_body={"regex": "a"},
        )
    with pytest.raises(BadRequestError, match="chat_template_kwargs"):
        c.chat.completions.create(
            model="smollm2",
            messages=CHAT,
            max_tokens=2,
            extra_body={"chat_template_kwargs": {"tokenize": True}},
        )
