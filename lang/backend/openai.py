"""`OpenAI`: programs against any OpenAI-compatible API (ours at `/v1` included) through the
official `openai` client. Chat models receive the state's messages, so a `gen` must be the
first thing in an assistant message; features the API lacks raise `UnsupportedFeatureError`.
A completion model's `select` scores the choices from echoed prompt logprobs, with every
choices method; a chat model's picks by constrained decoding (token_length_normalized only)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lang.backend.base import BaseBackend, Meta
from lang.chat_template import ChatTemplate
from lang.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    TokenLogprobs,
    choice_token_logprobs,
    decide,
    token_length_normalized,
)
from lang.errors import AuthenticationError, BackendError, LangError, UnsupportedFeatureError

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
        self._authentication_error = openai.AuthenticationError

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
        if not self.is_chat_model:
            if temperature > 1e-5:
                raise UnsupportedFeatureError(
                    "select with temperature > 0", self.name, "choices are scored greedily"
                )
            return self._select_by_prompt_logprobs(s.text_, choices, choices_method)
        return self._select_by_constrained_decoding(s, choices, choices_method)

    def _select_by_prompt_logprobs(
        self, prefix: str, choices: list[str], method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        """Score `prefix + choice` from the prompt logprobs /v1/completions echoes with
        max_tokens=0, as RuntimeEndpoint does with /generate: the prefix alone first (its
        token count, and its tokens into a prefix cache), then all choices in one request."""
        committed = self._echo([prefix]) if prefix else None
        start = max(len(_echoed_entries(committed)[0]) - 1, 0) if committed else 0
        scored = self._echo([prefix + choice for choice in choices])
        input_logprobs = [
            choice_token_logprobs(tokens[start:], prefix) for tokens in _echoed_entries(scored)
        ]
        unconditional = None
        if method.requires_unconditional_logprobs:
            texts = ["".join(entry[2] for entry in tokens) for tokens in input_logprobs]
            unconditional = _echoed_entries(self._echo(texts))
            for choice, tokens, alone in zip(choices, input_logprobs, unconditional):
                if len(tokens) != len(alone):
                    raise BackendError(
                        f"{method!r}: the choice {choice!r} tokenizes differently without its "
                        "context, so its tokens cannot be scored alone"
                    )
        decision = decide(method, choices, input_logprobs, unconditional)
        if committed is not None:
            usage = _meta(committed, None)
            decision.meta_info.update(
                {k: usage[k] for k in ("prompt_tokens", "cached_tokens") if k in usage}
            )
        return decision

    def _echo(self, prompts: list[str]) -> Any:
        """A prompt-only completion per prompt, echoing each prompt token's logprob."""
        return self._call(
            self.client.completions.create,
            model=self.model_name,
            prompt=prompts,
            max_tokens=0,
            temperature=0.0,
            echo=True,
            logprobs=0,
        )

    def _select_by_constrained_decoding(
        self, s: StreamExecutor, choices: list[str], choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        """Greedy decoding constrained to the choices: chat APIs return no prompt logprobs, so
        only the default choices method can be honoured, approximately."""
        if choices_method is not token_length_normalized:
            raise UnsupportedFeatureError(
                f"select with choices_method={choices_method!r}",
                f"{self.name} chat-model",
                "a chat API returns no prompt logprobs to score choices with; use "
                "token_length_normalized (approximated by constrained decoding) or a completion "
                "model (is_chat_model=False)",
            )
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
        except self._authentication_error as e:
            raise AuthenticationError(str(e)) from None
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


def _echoed_entries(response: Any) -> list[TokenLogprobs]:
    """Per prompt, in order, its tokens' [logprob, token_id, text] entries (no ids here)."""
    entries = []
    for choice in sorted(response.choices, key=lambda c: c.index):
        logprobs = choice.logprobs
        if logprobs is None or not logprobs.tokens:
            raise UnsupportedFeatureError(
                "select on a completion model",
                "OpenAI",
                "this API echoes no prompt logprobs (echo=True, logprobs=0, max_tokens=0)",
            )
        entries.append([[lp, None, t] for lp, t in zip(logprobs.token_logprobs, logprobs.tokens)])
    return entries


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
