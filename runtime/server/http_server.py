"""The HTTP server: FastAPI routes for the native API and the OpenAI-compatible API."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.server.metrics import ServerMetrics
from runtime.server.openai_api import ChatCompletionRequest, CompletionRequest, OpenAIServing
from runtime.server.tokenizer_manager import BadRequest, TokenizerManager
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class GenerateRequest(BaseModel):
    """Body of POST /generate (SGLang's field names)."""

    model_config = ConfigDict(extra="forbid")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict | list[dict] | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | list[str] | None = None


def error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = (
        "invalid_request_error"
        if status == 400
        else "authentication_error"
        if status == 401
        else "server_error"
    )
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": status}},
        status_code=status,
    )


async def parse_body(request: Request, model: type[BaseModel]):
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise BadRequest(f"{field}: {first['msg']}", field) from e


def json_response(obj) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


def respond(out, stream: bool) -> Response:
    """An SSE stream for an async iterator of events, else a JSON body."""
    return StreamingResponse(out, media_type="text/event-stream") if stream else json_response(out)


def create_app(
    args: ServerArgs, info: dict, tm: TokenizerManager, metrics: ServerMetrics
) -> FastAPI:
    app = FastAPI(title="radixgen")
    served = [os.path.basename(args.model_path.rstrip("/")), args.model_path, "default"]
    openai = OpenAIServing(tm, list(dict.fromkeys(served)))

    @app.middleware("http")
    async def guard(request: Request, call_next):
        tm.start()
        authorized = request.headers.get("authorization") == f"Bearer {args.api_key}"
        if args.api_key and request.url.path != "/health" and not authorized:
            return error(401, "missing or wrong API key (Authorization: Bearer <key>)")
        return await call_next(request)

    @app.exception_handler(BadRequest)
    async def bad_request(_, e: BadRequest):
        return error(400, str(e), e.param)

    @app.exception_handler(ValueError)  # RequestRejected and sampling-parameter errors
    async def bad_value(_, e: ValueError):
        return error(400, str(e))

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate():
        params = tm.prepare(None, [1, 2, 3], {"max_new_tokens": 1}).params[0]
        state = tm.submit(f"health-{time.monotonic_ns()}", [1, 2, 3], params)
        await asyncio.wait_for(tm.wait_result(state), timeout=60)
        return Response(status_code=200)

    @app.get("/get_model_info")
    async def model_info():
        return {
            "model_path": args.model_path,
            "model_folder": info["model_folder"],
            "tokenizer_path": info["model_folder"],
            "is_generation": True,
            "chat_template": getattr(tm.tokenizer, "chat_template", None),
            "vocab_size": info["vocab_size"],
            "context_length": info["context_length"],
            "max_total_tokens": info["kv_pool_size"],
        }

    @app.get("/get_server_info")
    async def server_info():
        return {"server_args": vars(args) | {"api_key": None}, "stats": tm.stats}

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
        body = json.loads(await request.body() or b"{}")
        rid = body.get("rid") if isinstance(body, dict) else None
        if not isinstance(rid, str):
            raise BadRequest("rid must be a string", "rid")
        tm.abort(rid)
        return Response(status_code=200)

    @app.post("/generate")
    async def generate(request: Request):
        body = await parse_body(request, GenerateRequest)
        # in a worker thread: compiling a large schema must not stall other streams
        batch = await asyncio.to_thread(
            tm.prepare, body.text, body.input_ids, body.sampling_params, body.rid
        )
        for p in batch.prompts:
            tm.check_prompt(p, "input_ids" if body.input_ids is not None else "text")
        for sp in batch.params:
            sp.validate(info["vocab_size"])
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

    @app.get("/v1/models")
    async def models():
        return openai.models()

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse_body(request, CompletionRequest)
        return respond(await openai.completions(body, request.is_disconnected), body.stream)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse_body(request, ChatCompletionRequest)
        return respond(await openai.chat(body, request.is_disconnected), body.stream)

    return app
