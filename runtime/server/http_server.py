"""The HTTP server: FastAPI routes for the native API and the OpenAI-compatible API."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import time

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import ClientDisconnect

from runtime.sampling.params import is_valid_text
from runtime.server.api_docs import describe_request_bodies
from runtime.server.metrics import ServerMetrics
from runtime.server.openai_api import ChatCompletionRequest, CompletionRequest, OpenAIServing
from runtime.server.tokenizer_manager import (
    BadRequest,
    ClientGone,
    RequestFailed,
    ServerStopping,
    TokenizerManager,
    check_logprob_args,
)
from runtime.server_args import ServerArgs
from runtime.version import version

logger = logging.getLogger(__name__)


class GenerateRequest(BaseModel):
    """Body of POST /generate (SGLang's field names)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no coercion: "1" is not 1

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict | list[dict] | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | list[str] | None = None


class TokenizeRequest(BaseModel):
    """Body of POST /tokenize (SGLang's and vLLM's fields)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    prompt: str | list[str]
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    """Body of POST /detokenize."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    tokens: list[int] | list[list[int]]
    skip_special_tokens: bool = False


class PayloadTooLarge(Exception):
    """The body is larger than --max-request-bytes (HTTP 413)."""


BODY_READ_TIMEOUT = 60.0  # seconds a client may take to send its body
HEALTH_GENERATE_TIMEOUT = 60.0  # seconds /health_generate waits for one token


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    413: "invalid_request_error",
    503: "service_unavailable",
}


def error(status: int, message: str, param: str | None = None, headers=None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "server_error")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": status}},
        status_code=status,
        headers=headers,
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) past `limit` bytes: by its Content-Length before reading, and
    while reading for chunked bodies; a client too slow to send it gets 400."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise PayloadTooLarge(f"the body exceeds {limit} bytes (--max-request-bytes)")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"the body exceeds {limit} bytes (--max-request-bytes)")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), BODY_READ_TIMEOUT)
    except asyncio.TimeoutError:
        raise BadRequest(f"the body did not arrive within {BODY_READ_TIMEOUT:.0f} s") from None
    except ClientDisconnect:  # left before its body was whole: nothing to answer, or to log
        raise ClientGone("while sending its body") from None


def parse_json(raw: bytes):
    """orjson refuses invalid UTF-8, lone surrogates and nesting deeper than 1024."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        field = _lone_surrogate_field(raw) if "surrogate" in str(e) else None
        if field is not None:
            raise BadRequest(
                f"{field}: strings must be valid Unicode (a lone surrogate)", field
            ) from None
        raise BadRequest(f"the body is not valid JSON: {e}") from None


def _lone_surrogate_field(raw: bytes) -> str | None:
    """The path (e.g. messages.0.content) of the first string holding a lone surrogate."""
    try:
        data = json.loads(raw)  # the standard parser keeps lone surrogates
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and not is_valid_text(value):
            return path or "body"
        if isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and not is_valid_text(key):
                    return path or "body"
                stack.append((f"{path}.{key}" if path else str(key), item))
    return None


async def parse_body(request: Request, model: type[BaseModel], limit: int):
    data = parse_json(await read_body(request, limit))
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise BadRequest(f"{field}: {first['msg']}", field) from None


def authorized(header: str, api_key: str) -> bool:
    """`Authorization: Bearer KEY`, the scheme in any case, the key compared in constant time."""
    scheme, _, token = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode("utf-8", "replace"), api_key.encode("utf-8")
    )


class Guard:
    """ASGI middleware in front of every route that checks the API key. (A plain ASGI layer:
    FastAPI's decorator middleware would hide client disconnects from the routes.)"""

    def __init__(self, app, api_key: str | None):
        self.app, self.api_key = app, api_key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.api_key and scope["path"] != "/health":
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not authorized(header, self.api_key):
                response = error(
                    401,
                    "missing or wrong API key (Authorization: Bearer <key>)",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def json_response(obj) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


def respond(out, stream: bool) -> Response:
    """An SSE stream for an async iterator of events, else a JSON body."""
    return StreamingResponse(out, media_type="text/event-stream") if stream else json_response(out)


BODIES = {  # the body each POST route parses itself, shown in /docs
    "/generate": GenerateRequest,
    "/v1/completions": CompletionRequest,
    "/v1/chat/completions": ChatCompletionRequest,
    "/tokenize": TokenizeRequest,
    "/v1/tokenize": TokenizeRequest,
    "/detokenize": DetokenizeRequest,
    "/v1/detokenize": DetokenizeRequest,
}


def create_app(
    args: ServerArgs, info: dict, tm: TokenizerManager, metrics: ServerMetrics
) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_):
        tm.start()  # results and stats flow from the start, before any request
        yield

    app = FastAPI(title="radixgen", version=version(), lifespan=lifespan)
    describe_request_bodies(app, BODIES)
    if args.served_model_name is not None:
        served = [args.served_model_name]
    else:
        served = [os.path.basename(args.model_path.rstrip("/")), args.model_path, "default"]
    openai = OpenAIServing(tm, list(dict.fromkeys(served)))

    app.add_middleware(Guard, api_key=args.api_key)
    limit = args.max_request_bytes

    @app.exception_handler(BadRequest)
    async def bad_request(_, e: BadRequest):
        return error(400, str(e), e.param)

    @app.exception_handler(ValueError)  # RequestRejected and sampling-parameter errors
    async def bad_value(_, e: ValueError):
        return error(400, str(e))

    @app.exception_handler(PayloadTooLarge)
    async def too_large(_, e: PayloadTooLarge):
        return error(413, str(e))

    @app.exception_handler(RequestFailed)
    async def failed(_, e: RequestFailed):
        return error(500, str(e))

    @app.exception_handler(ServerStopping)
    async def stopping(_, e: ServerStopping):
        return error(503, str(e))

    @app.exception_handler(Exception)  # a bug: still an error in the API's shape (and logged)
    async def internal(_, e: Exception):
        return error(500, f"internal error: {type(e).__name__}")

    @app.exception_handler(ClientGone)
    async def client_gone(_, e: ClientGone):
        logger.info("client left (%s); its request, if any, aborted", e)
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate():
        params = tm.prepare(None, [1, 2, 3], {"max_new_tokens": 1}).params[0]
        state = tm.submit(f"health-{time.monotonic_ns()}", [1, 2, 3], params)
        try:
            await asyncio.wait_for(tm.wait_result(state), timeout=HEALTH_GENERATE_TIMEOUT)
        except asyncio.TimeoutError:
            tm.abort(state.rid)
            return error(
                503, f"the model generated no token within {HEALTH_GENERATE_TIMEOUT:.0f} s"
            )
        return Response(status_code=200)

    @app.get("/get_model_info")
    async def model_info():
        return {
            "model_path": args.model_path,
            "served_model_name": openai.model_names[0],
            "model_folder": info["model_folder"],
            "tokenizer_path": info["tokenizer_folder"],
            "is_generation": True,
            "chat_template": getattr(tm.tokenizer, "chat_template", None),
            "vocab_size": info["vocab_size"],
            "context_length": info["context_length"],
            "max_total_tokens": info["kv_pool_size"],
        }

    @app.get("/get_server_info")
    async def server_info():
        out = {"server_args": vars(args) | {"api_key": None}, "stats": tm.stats}
        if tm.num_workers > 1:  # stats are the totals; each worker's as well
            out["workers"] = [
                {
                    "worker": w,
                    "pid": info["worker_pids"][w],
                    "requests_in_flight": tm.router.in_flight[w],
                    **stats,
                }
                for w, stats in enumerate(tm.worker_stats)
            ]
        if args.tp_size > 1:  # rank 0 of each worker is its scheduler (above)
            out["tensor_parallel_ranks"] = info["tp_ranks"]
        return out

    @app.get("/metrics")
    async def metrics_text():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/flush_cache")
    async def flush_cache():
        ok = await tm.flush_cache()
        if not ok:
            return error(400, "cache not flushed: requests are still running")
        return Response("cache flushed", status_code=200)

    @app.post("/abort_request")
    async def abort_request(request: Request):
        body = parse_json(await read_body(request, limit) or b"{}")
        rid = body.get("rid") if isinstance(body, dict) else None
        if not isinstance(rid, str):
            raise BadRequest("rid must be a string", "rid")
        tm.abort(rid)
        return Response(status_code=200)

    @app.post("/generate")
    async def generate(request: Request):
        body = await parse_body(request, GenerateRequest, limit)
        # in a worker thread: tokenizing a long batch must not stall other streams
        batch = await asyncio.to_thread(
            tm.prepare, body.text, body.input_ids, body.sampling_params, body.rid
        )
        for p in batch.prompts:
            tm.check_prompt(p, "input_ids" if body.input_ids is not None else "text")
            check_logprob_args(len(p), body.logprob_start_len, body.top_logprobs_num)
        for sp in batch.params:
            sp.validate(info["vocab_size"])
        tm.check_rids(batch.rids)
        states = [
            tm.submit(
                rid,
                p,
                sp,
                body.return_logprob,
                body.logprob_start_len,
                body.top_logprobs_num,
                body.stream,
            )
            for p, sp, rid in zip(batch.prompts, batch.params, batch.rids)
        ]
        if body.stream:
            await tm.wait_started(states, request.is_disconnected)

            async def events():
                finished_sent = set()
                async for i, delta in tm.merge_streams(states):
                    res = states[i].result
                    if (
                        res is None
                        or i in finished_sent
                        or (delta is None and res.finish_reason is None)
                    ):
                        continue
                    out = res.to_response(tm.tokenizer, body.return_text_in_logprobs)
                    if not batch.is_single:
                        out["index"] = i
                    if res.finish_reason is not None:
                        finished_sent.add(i)
                    yield f"data: {orjson.dumps(out).decode()}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        results = await asyncio.gather(
            *(tm.wait_result(s, request.is_disconnected) for s in states)
        )
        outs = [r.to_response(tm.tokenizer, body.return_text_in_logprobs) for r in results]
        return json_response(outs[0] if batch.is_single else outs)

    @app.get("/version")
    async def server_version():
        return {"version": version()}

    async def tokenizer_body(request: Request, model: type[BaseModel]):
        body = await parse_body(request, model, limit)
        if body.model is not None:
            openai.check_model(body.model)
        return body

    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(request: Request):
        body = await tokenizer_body(request, TokenizeRequest)
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        for p in prompts:
            tm.check_text(p, "prompt")
        encode = tm.tokenizer.encode
        ids = await asyncio.to_thread(
            lambda: [encode(p, add_special_tokens=body.add_special_tokens) for p in prompts]
        )
        one = isinstance(body.prompt, str)
        return {
            "tokens": ids[0] if one else ids,
            "count": len(ids[0]) if one else [len(x) for x in ids],
            "max_model_len": info["context_length"],
        }

    @app.post("/detokenize")
    @app.post("/v1/detokenize")
    async def detokenize(request: Request):
        body = await tokenizer_body(request, DetokenizeRequest)
        one = not body.tokens or isinstance(body.tokens[0], int)
        seqs = [body.tokens] if one else body.tokens

        def decode() -> list[str]:  # in a worker thread, as /tokenize: long inputs take seconds
            for seq in seqs:
                tm.check_prompt(seq, "tokens", context_check=False)
            return [
                tm.tokenizer.decode(x, skip_special_tokens=body.skip_special_tokens) for x in seqs
            ]

        texts = await asyncio.to_thread(decode)
        return {"text": texts[0] if one else texts}

    @app.get("/v1/models")
    async def models():
        return openai.models()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse_body(request, CompletionRequest, limit)
        return respond(await openai.completions(body, request.is_disconnected), body.stream)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse_body(request, ChatCompletionRequest, limit)
        return respond(await openai.chat(body, request.is_disconnected), body.stream)

    return app
