"""OpenAI-compatible /v1/completions and /v1/chat/completions on top of the TokenizerManager."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from runtime.outputs import GenerationResult
from runtime.sampling.params import (
    MAX_CONSTRAINT_DEPTH,
    SamplingParams,
    check_constraint_depth,
    json_depth,
    short_repr,
)
from runtime.server.tokenizer_manager import (
    BadRequest,
    ReqState,
    RequestRejected,
    TokenizerManager,
)
from runtime.server.tool_calls import ToolCall, ToolCallStream, ToolSpec, new_call_id
from runtime.server.tool_prompt import TemplateSupport, render_messages, request_tool_calls

FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # no coercion: "1" is not 1

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stream: bool = False
    stream_options: dict | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    # accepted and ignored: they ask for nothing this server does (stored completions,
    # billing tiers, reasoning budgets, end-user ids)
    user: str | None = None
    store: bool | None = None
    metadata: dict | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    # extensions shared with SGLang
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    best_of: int | None = None
    suffix: str | None = None


class ChatCompletionRequest(_Common):
    messages: list[dict]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict | None = None  # extra variables for the chat template
    # SGLang's constraints outside response_format
    regex: str | None = None
    ebnf: str | None = None
    json_schema: str | dict | None = None


# apply_chat_template's own arguments, which chat_template_kwargs may not override
_TEMPLATE_ARGUMENTS = {
    "conversation",
    "messages",
    "tools",
    "tokenize",
    "add_generation_prompt",
    "return_dict",
    "continue_final_message",
}


def sampling_params(req: _Common, max_tokens: int | None, default_max: int) -> SamplingParams:
    params = {
        "max_new_tokens": default_max if max_tokens is None else max_tokens,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "top_k": -1 if req.top_k is None else req.top_k,
        "min_p": req.min_p or 0.0,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": 1.0 if req.repetition_penalty is None else req.repetition_penalty,
        "min_new_tokens": req.min_tokens or 0,
        "stop": req.stop or [],
        "stop_token_ids": req.stop_token_ids or [],
        "ignore_eos": req.ignore_eos,
        "skip_special_tokens": req.skip_special_tokens,
        "seed": req.seed,
    }
    if req.logit_bias:
        params["logit_bias"] = req.logit_bias
    try:
        return SamplingParams.from_dict(params)
    except ValueError as e:
        raise BadRequest(
            str(e).replace("sampling_params.", "").replace("max_new_tokens", "max_tokens")
        ) from e


def response_format_schema(response_format: dict | None) -> str | None:
    """The JSON schema (as text) that response_format asks for, None for plain text."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise BadRequest("response_format must be an object", "response_format")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
            raise BadRequest(
                "response_format.json_schema must be an object with a 'schema'", "response_format"
            )
        schema = spec.get("schema", {})
        if json_depth(schema) > MAX_CONSTRAINT_DEPTH:
            raise BadRequest(
                f"response_format.json_schema.schema nests more than {MAX_CONSTRAINT_DEPTH} "
                "levels deep",
                "response_format",
            )
        return json.dumps(schema)
    raise BadRequest(
        f"response_format type {kind!r} is not supported (text, json_object, json_schema)",
        "response_format",
    )


def usage(results: list[GenerationResult], n: int = 1) -> dict:
    """OpenAI's usage: each prompt counted once (results hold n samples per prompt, in order),
    every sample's completion tokens."""
    firsts = results[::n]
    prompt = sum(r.prompt_tokens for r in firsts)
    completion = sum(len(r.output_ids) for r in results)
    cached = sum(r.cached_tokens for r in firsts)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _finish(result: GenerationResult) -> str | None:
    if result.finish_reason is None:
        return None
    return FINISH_REASONS.get(result.finish_reason["type"], "stop")


def _tool_finish(finish: str | None) -> str | None:
    """A choice that ends with calls finishes with "tool_calls" (unless cut by length)."""
    return "tool_calls" if finish == "stop" else finish


def usage_chunk(
    kind: str, rid: str, created: int, model: str, states: list[ReqState], n: int = 1
) -> dict:
    """The last streamed chunk when stream_options.include_usage is set."""
    results = [s.result for s in states if s.result is not None]
    return {
        "id": rid,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(results, n),
    }


def sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


class OpenAIServing:
    def __init__(self, tm: TokenizerManager, model_names: list[str]):
        self.tm = tm
        self.model_names = model_names
        self._template_support: TemplateSupport | None = None

    def check_model(self, name: str) -> None:
        if name not in self.model_names:
            raise BadRequest(
                f"model {name!r} is not served here; use one of {self.model_names}", "model"
            )

    def models(self) -> dict:
        now = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_names[0],
                    "object": "model",
                    "created": now,
                    "owned_by": "radixgen",
                }
            ],
        }

    def _token_text(self, tid: int) -> str:
        return self.tm.tokenizer.decode([tid])

    # ---- shared plumbing ------------------------------------------------------------------
    def _submit_n(
        self, prompt_ids: list[int], params: SamplingParams, n: int, **kw
    ) -> list[ReqState]:
        if not 1 <= n <= 128:
            raise BadRequest("n must be an integer in [1, 128]", "n")
        base = uuid.uuid4().hex
        return [
            self.tm.submit(f"{base}-{i}", prompt_ids, params.for_copy(i), **kw) for i in range(n)
        ]

    async def _gather(self, states: list[ReqState], is_disconnected) -> list[GenerationResult]:
        return list(
            await asyncio.gather(*(self.tm.wait_result(s, is_disconnected) for s in states))
        )

    async def _run(self, stream: bool, states: list[ReqState], is_disconnected):
        """The results, or for a stream nothing once every request runs (a request refused
        before its first token still gets an HTTP error, not a broken stream)."""
        if stream:
            await self.tm.wait_started(states, is_disconnected)
            return None
        return await self._gather(states, is_disconnected)

    # ---- /v1/completions ------------------------------------------------------------------
    def _completion_prompts(self, req: CompletionRequest) -> list[list[int]]:
        p = req.prompt
        if isinstance(p, str):
            self.tm.check_text(p, "prompt")
            prompts = [self.tm.tokenizer.encode(p)]
        elif p and all(isinstance(x, str) for x in p):
            for x in p:
                self.tm.check_text(x, "prompt")
            prompts = [self.tm.tokenizer.encode(x) for x in p]
        elif p and all(isinstance(x, int) for x in p):
            prompts = [list(p)]
        else:
            prompts = [list(x) for x in p] if p else []
        if not prompts or any(not x for x in prompts):
            raise BadRequest("prompt must not be empty", "prompt")
        return prompts

    async def completions(self, req: CompletionRequest, is_disconnected):
        self.check_model(req.model)
        if req.suffix:
            raise BadRequest("suffix is not supported", "suffix")
        if req.best_of not in (None, 1):
            raise BadRequest("best_of other than 1 is not supported", "best_of")
        params = sampling_params(req, req.max_tokens, 16)
        prompts = self._completion_prompts(req)
        for p in prompts:
            self.tm.check_prompt(p, "prompt")
        want_lp = req.logprobs is not None
        kw = {
            "return_logprob": want_lp,
            "logprob_start_len": 0 if (want_lp and req.echo) else -1,
            "top_logprobs_num": req.logprobs or 0,
            "stream": req.stream,
        }
        states = [s for p in prompts for s in self._submit_n(p, params, req.n, **kw)]
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        results = await self._run(req.stream, states, is_disconnected)
        if req.stream:
            return self._stream_completions(req, states, prompts, rid, created)
        choices = []
        for i, res in enumerate(results):
            prompt_ids = prompts[i // req.n]
            text = (self.tm.tokenizer.decode(prompt_ids) if req.echo else "") + res.text
            choices.append(
                {
                    "index": i,
                    "text": text,
                    "finish_reason": _finish(res),
                    "logprobs": self._completion_logprobs(res, req.echo) if want_lp else None,
                }
            )
        usage_all = usage(results, req.n)
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": req.model,
            "choices": choices,
            "usage": usage_all,
        }

    def _completion_logprobs(self, res: GenerationResult, echo: bool) -> dict:
        pairs = (list(res.input_token_logprobs) if echo else []) + list(res.output_token_logprobs)
        tops = (list(res.input_top_logprobs) if echo else []) + list(res.output_top_logprobs)
        tokens = [self._token_text(t) for _, t in pairs]
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        return {
            "tokens": tokens,
            "token_logprobs": [lp for lp, _ in pairs],
            "top_logprobs": [
                None if top is None else {self._token_text(t): lp for lp, t in top} for top in tops
            ]
            if res.top_logprobs_num
            else None,
            "text_offset": offsets,
        }

    async def _stream_completions(self, req, states, prompts, rid, created) -> AsyncIterator[str]:
        def chunk(i, text, finish=None):
            return {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": req.model,
                "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": finish}],
            }

        if req.echo:
            for i in range(len(states)):
                yield sse(chunk(i, self.tm.tokenizer.decode(prompts[i // req.n])))
        async for i, delta in self.tm.merge_streams(states):
            if delta is None:
                res = states[i].result
                if res is not None:
                    yield sse(chunk(i, "", _finish(res)))
            elif delta:
                yield sse(chunk(i, delta))
        if (req.stream_options or {}).get("include_usage"):
            yield sse(usage_chunk("text_completion", rid, created, req.model, states, req.n))
        yield "data: [DONE]\n\n"

    # ---- /v1/chat/completions ---------------------------------------------------------------
    @property
    def template_support(self) -> TemplateSupport:
        if self._template_support is None:
            self._template_support = TemplateSupport.detect(self.tm.tokenizer)
        return self._template_support

    def _chat_messages(self, req: ChatCompletionRequest) -> list[dict]:
        """The request's messages, validated: role, text content, and the tool fields."""
        if not req.messages:
            raise BadRequest("messages must not be empty", "messages")
        messages = []
        for i, m in enumerate(req.messages):
            role, content = m.get("role"), m.get("content")
            if role not in ("system", "user", "assistant", "developer", "tool"):
                raise BadRequest(
                    f"messages[{i}].role {short_repr(role)} is not one of system, user, "
                    "assistant, tool",
                    "messages",
                )
            if isinstance(content, list):
                parts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") != "text":
                        raise BadRequest(
                            f"messages[{i}].content: only text parts are supported", "messages"
                        )
                    if not isinstance(part.get("text", ""), str):
                        raise BadRequest(
                            f"messages[{i}].content: a text part's text must be a string",
                            "messages",
                        )
                    parts.append(part.get("text", ""))
                content = "".join(parts)
            if content is None:
                content = ""
            if not isinstance(content, str):
                raise BadRequest(
                    f"messages[{i}].content must be a string or a list of text parts", "messages"
                )
            self.tm.check_text(content, "messages")
            message = {"role": "system" if role == "developer" else role, "content": content}
            if role == "assistant" and m.get("tool_calls") is not None:
                message["tool_calls"] = request_tool_calls(i, m["tool_calls"])
            if role == "tool":
                if not isinstance(m.get("tool_call_id"), str):
                    raise BadRequest(f"messages[{i}].tool_call_id must be a string", "messages")
                message["tool_call_id"] = m["tool_call_id"]
            messages.append(message)
        return messages

    def _chat_prompt(self, req: ChatCompletionRequest, spec: ToolSpec | None) -> list[int]:
        messages, tools = render_messages(self._chat_messages(req), spec, self.template_support)
        kw = dict(req.chat_template_kwargs or {})
        reserved = sorted(set(kw) & _TEMPLATE_ARGUMENTS)
        if reserved:
            raise BadRequest(f"chat_template_kwargs may not set {reserved}", "chat_template_kwargs")
        if tools:
            kw["tools"] = tools
        try:
            text = self.tm.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **kw
            )
        except Exception as e:  # the template's own checks (roles, their order)
            raise BadRequest(f"messages: the chat template refused them: {e}", "messages") from e
        self.tm.check_text(text, "messages")
        return self.tm.tokenizer.encode(text, add_special_tokens=False)

    async def chat(self, req: ChatCompletionRequest, is_disconnected):
        self.check_model(req.model)
        spec = ToolSpec.from_request(req.tools, req.tool_choice, req.parallel_tool_calls)
        schema = response_format_schema(req.response_format)
        if spec is not None and schema is not None:
            raise BadRequest(
                "response_format cannot be combined with tools (unless tool_choice is none)",
                "response_format",
            )
        max_tokens = (
            req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        )
        prompt = self._chat_prompt(req, spec)
        self.tm.check_prompt(prompt, "messages")
        params = sampling_params(req, max_tokens, max(self.tm.context_length - len(prompt) - 1, 1))
        params.json_schema = schema  # compiled by the scheduler, which names the field if bad
        extras = {n: getattr(req, n) for n in ("regex", "ebnf", "json_schema") if getattr(req, n)}
        if extras and (schema is not None or spec is not None or len(extras) > 1):
            raise BadRequest(
                "give one constraint: response_format, tools, regex, ebnf or json_schema",
                next(iter(extras)),
            )
        for name, value in extras.items():
            try:
                check_constraint_depth(name, value)
            except ValueError as e:
                raise BadRequest(str(e).replace("sampling_params.", ""), name) from None
            setattr(params, name, value)
        for name, value in (spec.constraint() if spec else {}).items():
            setattr(params, name, value)
        if req.top_logprobs and not req.logprobs:
            raise BadRequest("top_logprobs needs logprobs=true", "top_logprobs")
        kw = {
            "return_logprob": req.logprobs,
            "top_logprobs_num": req.top_logprobs or 0,
            "stream": req.stream,
        }
        states = self._submit_n(prompt, params, req.n, **kw)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            results = await self._run(req.stream, states, is_disconnected)
        except RequestRejected as e:
            message = str(e)
            if spec is not None and "sampling_params." in message:
                raise await self._bad_tool(spec, prompt, message, is_disconnected) from None
            for name in ("json_schema", "regex", "ebnf"):  # name the field the request used
                if f"sampling_params.{name}" in message:
                    field = "response_format" if schema is not None else name
                    raise BadRequest(
                        message.replace(f"sampling_params.{name}", field), field
                    ) from None
            raise
        if req.stream:
            return self._stream_chat(req, spec, states, rid, created)
        choices = []
        for i, res in enumerate(results):
            message, finish = {"role": "assistant", "content": res.text}, _finish(res)
            parsed = spec.parse_output(res.text) if spec else None
            if parsed and parsed.calls:
                calls = [ToolCall(new_call_id(), *call).as_openai() for call in parsed.calls]
                message.update(content=parsed.content, tool_calls=calls)
                finish = _tool_finish(finish)
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "logprobs": {
                        "content": self._chat_logprobs(
                            res.output_token_logprobs, res.output_top_logprobs
                        )
                    }
                    if req.logprobs
                    else None,
                    "finish_reason": finish,
                }
            )
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": req.model,
            "choices": choices,
            "usage": usage(results, req.n),
        }

    async def _bad_tool(
        self, spec: ToolSpec, prompt: list[int], message: str, is_disconnected
    ) -> BadRequest:
        """The error for a tool-call grammar the scheduler refused, naming the tool at fault:
        compiles each tool's parameters alone (a probe that generates nothing), in the order
        the grammar has them, up to the first that fails. A grammar that took too long is not
        probed (each probe could take as long again)."""
        reason = message.split(": ", 1)[-1]
        if "--grammar-compile-timeout" not in message:
            for tool in spec.tools:
                params = SamplingParams(max_new_tokens=0, json_schema=tool.parameters)
                probe = self.tm.submit(f"probe-{uuid.uuid4().hex}", prompt[:1], params)
                try:
                    await self.tm.wait_result(probe, is_disconnected)
                except RequestRejected as e:
                    if "sampling_params." in str(e):
                        reason = str(e).split(": ", 1)[-1]
                        return BadRequest(
                            f"tools: the parameters of {tool.name!r}: {reason}", "tools"
                        )
        return BadRequest(f"tools: the grammar of the tool calls: {reason}", "tools")

    def _chat_logprobs(self, pairs, tops) -> list[dict]:
        def entry(lp, tid):
            text = self._token_text(tid)
            return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

        out = []
        for j, (lp, tid) in enumerate(pairs):
            e = entry(lp, tid)
            e["top_logprobs"] = [entry(a, b) for a, b in tops[j]] if j < len(tops) else []
            out.append(e)
        return out

    async def _stream_chat(self, req, spec, states, rid, created) -> AsyncIterator[str]:
        def chunk(i, delta, finish=None, logprobs=None):
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": req.model,
                "choices": [
                    {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
                ],
            }

        for i in range(len(states)):
            yield sse(chunk(i, {"role": "assistant", "content": ""}))
        sent_lp = [0] * len(states)
        calls = [ToolCallStream(spec) if spec else None for _ in states]
        async for i, delta in self.tm.merge_streams(states):
            res = states[i].result
            logprobs = None
            if req.logprobs and res is not None:
                new = res.output_token_logprobs[sent_lp[i] :]
                logprobs = {
                    "content": self._chat_logprobs(new, res.output_top_logprobs[sent_lp[i] :])
                }
                sent_lp[i] = len(res.output_token_logprobs)
            if calls[i] is None:
                deltas = [{"content": delta}] if delta else []
            else:  # the calls' text becomes tool_calls deltas
                deltas = calls[i].deltas(states[i].text, final=delta is None)
            if delta is not None and logprobs and not deltas:
                deltas = [{"content": ""}]
            for k, d in enumerate(deltas):
                yield sse(chunk(i, d, None, logprobs if k == 0 else None))
            if delta is None and res is not None:
                finish = _finish(res)
                if calls[i] is not None and calls[i].call_ids:
                    finish = _tool_finish(finish)
                yield sse(chunk(i, {}, finish, None if deltas else logprobs))
        if (req.stream_options or {}).get("include_usage"):
            yield sse(usage_chunk("chat.completion.chunk", rid, created, req.model, states, req.n))
        yield "data: [DONE]\n\n"
