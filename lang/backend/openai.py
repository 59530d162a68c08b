"""`OpenAI`: programs against any OpenAI-compatible API (ours at `/v1` included) through the
official `openai` client. Chat models receive the state's messages, so a `gen` must be the
first thing in an assistant message; features the API lacks raise `UnsupportedFeatureError`."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lang.backend.base import BaseBackend, Meta
from lang.chat_template import ChatTemplate
from lang.choices import ChoicesDecision, ChoicesSamplingMethod, token_length_normalized
from lang.errors import BackendError, LangError, UnsupportedFeatureError

if TYPE_CHECKING:
    from lang.executor import StreamExecutor
    from lang.ir import SamplingParams

logger = logging.getLogger(__name__)

# JSON schemas that stand in for `dtype` (a JSON number is an integer's or float's text)
_DTYPE_SCHEMA = {"int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"}}


class OpenAI(BaseBackend):
    """`OpenAI(model_name, base_url=..., api_key=...)`; `is_chat_model=False` uses the
    completions API with the state's text as the prompt."""

    name = "OpenAI"

    def __init__(
        self,
        model_name: str,
        is_chat_model: bool | None = None,
        chat_template: ChatTemplate | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **client_kwargs: Any,
    ):
        try:
            import openai
        except ImportError as e:
            raise LangError(
                "the OpenAI backend needs the openai package: pip install openai"
            ) from e
        self.model_name = model_name
        self.is_chat_model = True if is_chat_model is None else is_chat_model
        self.chat_template = chat_template or ChatTemplate.plain()
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, **client_kwargs)
        self._api_error = openai.OpenAIError

    def __repr__(self) -> str:
        return f"OpenAI({self.model_name!r}, base_url={str(self.client.base_url)!r})"

    def get_chat_template(self) -> ChatTemplate:
        return self.chat_template

    def generate(self, s: StreamExecutor, params: SamplingParams) -> tuple[Any, Meta | list]:
        response = self._create(s, params, stream=False)
        texts = [_choice_text(c) for c in response.choices]
        meta = _meta(response, response.choices[0].finish_reason)
        return (texts if len(texts) > 1 else texts[0]), meta

    def generate_stream(
        self, s: StreamExecutor, params: SamplingParams
    ) -> Iterator[tuple[str, Meta]]:
        meta: Meta = {}
        for chunk in self._create(s, params, stream=True):
            if chunk.choices:
                choice = chunk.choices[0]
                piece = (choice.delta.content if self.is_chat_model else choice.text) or ""
                meta = {**meta, **_meta(chunk, choice.finish_reason)}
                yield piece, meta
            elif chunk.usage is not None:  # the final usage-only chunk
                meta = {**meta, **_meta(chunk, meta.get("finish_reason"))}
                yield "", meta

    def select(
        self,
        s: StreamExecutor,
        choices: list[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod,
    ) -> ChoicesDecision:
        """Constrained greedy decoding over the choices (chat APIs return no prompt
        logprobs, so only the default choices method can be honoured, approximately)."""
        if choices_method is not token_length_normalized:
            raise UnsupportedFeatureError(
                f"select with {choices_method!r}", self.name, "it needs prompt logprobs"
            )
        if not self.is_chat_model:
            raise UnsupportedFeatureError("select on a completion model", self.name)
        schema = {"type": "string", "enum": choices}
        response = self._call(
            self.client.chat.completions.create,
            model=self.model_name,
            messages=self._messages(s),
            max_tokens=max(len(c) for c in choices) + 8,
            temperature=0.0,
            response_format=_response_format(schema),
        )
        picked = json.loads(response.choices[0].message.content)
        meta = {"method": "constrained enum", **_meta(response, response.choices[0].finish_reason)}
        return ChoicesDecision(picked, meta)

    def _create(self, s: StreamExecutor, params: SamplingParams, stream: bool):
        kwargs = self._request_kwargs(params)
        if stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        if self.is_chat_model:
            create, target = self.client.chat.completions.create, {"messages": self._messages(s)}
        else:
            create, target = self.client.completions.create, {"prompt": s.text_}
        return self._call(create, model=self.model_name, **target, **kwargs)

    def _call(self, create, **kwargs):
        try:
            return create(**kwargs)
        except self._api_error as e:
            raise BackendError(str(e), getattr(e, "status_code", None)) from None

    def _messages(self, s: StreamExecutor) -> list[dict]:
        """The messages before the assistant message a generation fills."""
        if s.cur_role != "assistant" or s.text_[s.cur_role_begin_pos :].strip():
            raise UnsupportedFeatureError(
                "gen outside the start of an assistant message",
                self.name,
                "a chat API generates whole assistant messages: write "
                "s += sgl.assistant(sgl.gen(...)) with nothing before the gen",
            )
        return [dict(m) for m in s.messages_]

    def _request_kwargs(self, params: SamplingParams) -> dict:
        for feature, used in (
            ("regex", params.regex is not None),
            ("dtype=bool", params.dtype == "bool"),
            ("return_logprob", bool(params.return_logprob)),
            ("json_schema on a completion model", not self.is_chat_model and _schema(params)),
        ):
            if used:
                raise UnsupportedFeatureError(
                    feature, self.name, "the OpenAI API has no such option"
                )
        kwargs: dict[str, Any] = {
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "frequency_penalty": params.frequency_penalty,
            "presence_penalty": params.presence_penalty,
            "stop": params.stop_list() or None,
            "n": params.n,
        }
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if schema := _schema(params):
            kwargs["response_format"] = _response_format(schema)
        # Options outside the OpenAI API go in the body only when set (servers like ours
        # accept them; others refuse them, which then names the option).
        extra = {
            "top_k": params.top_k if params.top_k not in (None, -1) else None,
            "min_p": params.min_p or None,
            "min_tokens": params.min_new_tokens or None,
            "ignore_eos": params.ignore_eos or None,
            "stop_token_ids": params.stop_token_ids or None,
        }
        if extra := {k: v for k, v in extra.items() if v is not None}:
            kwargs["extra_body"] = extra
        return kwargs


def _schema(params: SamplingParams) -> dict | None:
    if params.dtype:
        return _DTYPE_SCHEMA.get(params.dtype)
    return json.loads(params.json_schema) if params.json_schema else None


def _response_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _choice_text(choice: Any) -> str:
    message = getattr(choice, "message", None)
    return (message.content if message is not None else choice.text) or ""


def _meta(response: Any, finish_reason: str | None) -> Meta:
    """The generation's meta info in /generate's terms."""
    meta: Meta = {"id": response.id, "finish_reason": finish_reason}
    usage = getattr(response, "usage", None)
    if usage is not None:
        details = getattr(usage, "prompt_tokens_details", None)
        meta.update(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=getattr(details, "cached_tokens", 0) or 0,
        )
    return meta
