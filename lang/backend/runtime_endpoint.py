"""The backend for a radixgen (or SGLang) server's native `/generate` API: generations with
every sampling option, regex and JSON-schema constraints, and `select` scored from prompt
logprobs of batched `max_new_tokens=0` requests that reuse the radix cache."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lang.backend.base import BaseBackend, Meta
from lang.backend.http import HttpClient
from lang.chat_template import ChatTemplate
from lang.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    choice_token_logprobs,
    decide,
)
from lang.errors import UnsupportedFeatureError
from lang.ir import SamplingParams, schema_text

if TYPE_CHECKING:
    from lang.executor import StreamExecutor

logger = logging.getLogger(__name__)

# SamplingParams fields sent as they are inside `sampling_params` (stop, dtype, regex and
# json_schema are translated first), and those sent at the top level.
_SAMPLING_FIELDS = (
    "max_new_tokens",
    "min_new_tokens",
    "n",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
)
_LOGPROB_FIELDS = ("return_logprob", "logprob_start_len", "top_logprobs_num")


class RuntimeEndpoint(BaseBackend):
    """A running server at `base_url` (e.g. "http://127.0.0.1:30000")."""

    name = "RuntimeEndpoint"

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.http = HttpClient(self.base_url, api_key, timeout)
        self.model_info = self.http.get("/get_model_info")
        source = self.model_info.get("chat_template")
        self.chat_template = ChatTemplate.from_jinja(source) if source else ChatTemplate.plain()

    def __repr__(self) -> str:
        return f"RuntimeEndpoint({self.base_url!r})"

    def get_model_name(self) -> str:
        return self.model_info.get("model_path", "")

    def get_chat_template(self) -> ChatTemplate:
        return self.chat_template

    def flush_cache(self) -> None:
        self.http.post("/flush_cache", {})

    def get_server_info(self) -> dict:
        return self.http.get("/get_server_info")

    def cache_prefix(self, text: str) -> None:
        self.generate_raw({"text": text, "sampling_params": {"max_new_tokens": 0}})

    def commit_prefix(self, s: StreamExecutor) -> None:
        self.cache_prefix(s.text_)

    def generate_raw(self, body: dict) -> Any:
        """POST `body` to /generate and return the decoded answer."""
        return self.http.post("/generate", body)

    def generate(self, s: StreamExecutor, params: SamplingParams) -> tuple[Any, Meta | list]:
        out = self.generate_raw(generate_body(s.text_, params))
        if isinstance(out, list):  # n > 1
            return [o["text"] for o in out], [o["meta_info"] for o in out]
        return out["text"], out["meta_info"]

    def generate_stream(
        self, s: StreamExecutor, params: SamplingParams
    ) -> Iterator[tuple[str, Meta]]:
        if (params.n or 1) > 1:
            raise UnsupportedFeatureError("streaming with n > 1", self.name)
        sent = 0
        for event in self.http.stream("/generate", generate_body(s.text_, params, stream=True)):
            piece = event["text"][sent:]
            sent += len(piece)
            yield piece, event["meta_info"]

    def select(
        self,
        s: StreamExecutor,
        choices: list[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod,
    ) -> ChoicesDecision:
        if temperature > 1e-5:
            raise UnsupportedFeatureError(
                "select with temperature > 0", self.name, "choices are scored greedily"
            )
        return select_by_logprobs(self, s.text_, choices, choices_method)


def generate_body(text: str, params: SamplingParams, stream: bool = False) -> dict:
    """The /generate request for one generation after `text`."""
    sampling = {f: getattr(params, f) for f in _SAMPLING_FIELDS if getattr(params, f) is not None}
    if not sampling.get("stop_token_ids"):
        sampling.pop("stop_token_ids", None)
    if stops := params.stop_list():
        sampling["stop"] = stops
    if params.dtype and (params.regex or params.json_schema):
        logger.warning("gen: dtype=%s replaces the regex/json_schema also given", params.dtype)
    if regex := params.constraint_regex():
        sampling["regex"] = regex
    elif params.json_schema is not None:
        sampling["json_schema"] = schema_text(params.json_schema)
    body: dict[str, Any] = {"text": text, "sampling_params": sampling}
    body.update({f: getattr(params, f) for f in _LOGPROB_FIELDS if getattr(params, f) is not None})
    if params.return_logprob:
        body["return_text_in_logprobs"] = params.return_text_in_logprobs is not False
    if stream:
        body["stream"] = True
    return body


def select_by_logprobs(
    backend: RuntimeEndpoint, prefix: str, choices: list[str], method: ChoicesSamplingMethod
) -> ChoicesDecision:
    """Score `prefix + choice` for every choice in one batched prompt-only request.

    The prefix is committed first (its tokens land in the radix cache and tell us its length);
    logprobs then start at the prefix's last token, which is dropped again unless the choice
    merged into it when tokenized (token healing)."""
    committed = backend.generate_raw({"text": prefix, "sampling_params": {"max_new_tokens": 0}})
    start = max(committed["meta_info"]["prompt_tokens"] - 1, 0)
    scored = backend.generate_raw(
        {
            "text": [prefix + choice for choice in choices],
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": start,
            "return_text_in_logprobs": True,
        }
    )
    input_logprobs = [
        choice_token_logprobs(out["meta_info"]["input_token_logprobs"], prefix) for out in scored
    ]
    unconditional = None
    if method.requires_unconditional_logprobs:
        alone = backend.generate_raw(
            {
                "input_ids": [[entry[1] for entry in tokens] for tokens in input_logprobs],
                "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            }
        )
        unconditional = [out["meta_info"]["input_token_logprobs"] for out in alone]
    output_logprobs = [out["meta_info"]["output_token_logprobs"] for out in scored]
    decision = decide(method, choices, input_logprobs, unconditional, output_logprobs)
    decision.meta_info.update(
        prompt_tokens=committed["meta_info"]["prompt_tokens"],
        cached_tokens=committed["meta_info"].get("cached_tokens", 0),
    )
    return decision
