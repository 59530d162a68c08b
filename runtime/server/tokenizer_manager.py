"""The HTTP process's side of the runtime: tokenizes, tracks request state, streams results."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from runtime.engine import normalize_generate_input
from runtime.messages import (
    AbortReq,
    BatchStrOut,
    FlushCacheReq,
    FlushCacheResp,
    TokenizedGenerateReq,
)
from runtime.model.loader import load_tokenizer
from runtime.outputs import GenerationResult
from runtime.sampling.params import SamplingParams
from runtime.server.metrics import ServerMetrics, total_stats
from runtime.server.router import Router

logger = logging.getLogger(__name__)


def max_token_bytes(tokenizer) -> int:
    """An upper bound on the bytes of text one token stands for: its spelling in the vocabulary
    has a character per byte (byte-level BPE) or more (SentencePiece's byte tokens), doubled
    as a margin for normalisers that shrink text."""
    return 2 * max((len(t) for t in tokenizer.get_vocab()), default=1)


class BadRequest(ValueError):
    """A request field is invalid; `param` names it (OpenAI's error shape)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class RequestRejected(ValueError):
    """The scheduler refused a request (for example a prompt longer than the context)."""


class RequestFailed(RuntimeError):
    """A request broke inside the server (HTTP 500); the server itself keeps serving."""


class ServerStopping(RequestFailed):
    """The server shut down before the request finished (HTTP 503)."""


class ClientGone(Exception):
    """The client disconnected before its request finished; the request was aborted."""


MAX_TOP_LOGPROBS = 256


def check_logprob_args(prompt_len: int, logprob_start_len, top_logprobs_num) -> None:
    if not _is_int(logprob_start_len) or not -1 <= logprob_start_len < prompt_len:
        raise BadRequest(
            f"logprob_start_len must be -1 or a prompt position in [0, {prompt_len})",
            "logprob_start_len",
        )
    if not _is_int(top_logprobs_num) or not 0 <= top_logprobs_num <= MAX_TOP_LOGPROBS:
        raise BadRequest(
            f"top_logprobs_num must be an integer in [0, {MAX_TOP_LOGPROBS}]", "top_logprobs_num"
        )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class ReqState:
    rid: str
    prompt_len: int
    params: SamplingParams
    return_logprob: bool
    top_logprobs_num: int
    created: float = field(default_factory=time.perf_counter)
    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    result: GenerationResult | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished: bool = False
    error: str | None = None
    error_status: int = 400
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    worker: int = 0  # the data-parallel worker running it

    def start_result(self, prompt_tokens: int, cached_tokens: int) -> GenerationResult:
        """The result, created empty by the first output (or by an early end)."""
        if self.result is None:
            self.result = GenerationResult(
                rid=self.rid,
                text="",
                output_ids=[],
                finish_reason=None,
                prompt_tokens=prompt_tokens,
                cached_tokens=cached_tokens,
                return_logprob=self.return_logprob,
                top_logprobs_num=self.top_logprobs_num,
            )
        return self.result

    def raise_error(self) -> None:
        if self.error is not None:
            if self.error_status == 503:
                raise ServerStopping(self.error)
            raise (RequestFailed if self.error_status >= 500 else RequestRejected)(self.error)


class TokenizerManager:
    """Request state of the HTTP process. With several scheduler workers (--dp-size), `router`
    picks each request's worker; the request's abort goes to that worker, a cache flush to
    all of them, and `stats` are their totals (`worker_stats` each one's)."""

    def __init__(
        self,
        tokenizer_folder: str,
        send_paths: str | list[str],
        recv_path: str,
        metrics: ServerMetrics,
        context_length: int,
        chat_template: str | None = None,
        router: Router | None = None,
    ):
        self.tokenizer = load_tokenizer(tokenizer_folder, chat_template)
        self.context_length = context_length
        # a text this long in UTF-8 has more tokens than the context, whatever it says
        self.max_prompt_bytes = context_length * max_token_bytes(self.tokenizer)
        ctx = zmq.asyncio.Context()
        if isinstance(send_paths, str):
            send_paths = [send_paths]
        self.sends = []
        for path in send_paths:
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.connect(f"ipc://{path}")
            self.sends.append(sock)
        self.router = router or Router(len(self.sends), "round_robin", 0)
        self.recv = ctx.socket(zmq.PULL)
        self.recv.setsockopt(zmq.RCVHWM, 0)
        self.recv.bind(f"ipc://{recv_path}")
        self.states: dict[str, ReqState] = {}
        self.metrics = metrics
        self.stats: dict = {}
        self.worker_stats: list[dict] = [{} for _ in self.sends]
        self._flush_waiters: list[list[asyncio.Future]] = [[] for _ in self.sends]
        self._loop_task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def num_workers(self) -> int:
        return len(self.sends)

    def start(self) -> None:
        if self._loop_task is None:
            self._loop = asyncio.get_running_loop()
            self._loop_task = self._loop.create_task(self._handle_loop())

    def update_stats(self, worker: int, stats: dict) -> None:
        """A worker's latest scheduler stats; `stats` becomes the total over workers."""
        self.worker_stats[worker] = stats
        self.stats = stats if self.num_workers == 1 else total_stats(self.worker_stats)
        self.metrics.update_engine(self.stats)
        if self.num_workers > 1:
            self.metrics.update_worker(worker, stats)

    # ---- requests ----------------------------------------------------------------------
    def prepare(self, text, input_ids, sampling_params, rid=None):
        """Tokenize and validate a /generate body; raises ValueError naming the bad field.
        Constraints are compiled by the scheduler, which answers a bad one with an error."""
        if text is not None:
            for t in [text] if isinstance(text, str) else text:
                self.check_text(t, "text")
        return normalize_generate_input(self.tokenizer, text, input_ids, sampling_params, rid)

    def check_text(self, text, field: str) -> None:
        """Refuse, before tokenizing it, a text too long to fit the context whatever its tokens."""
        if isinstance(text, str) and len(text) > self.max_prompt_bytes // 4:
            size = len(text.encode("utf-8", "replace"))
            if size > self.max_prompt_bytes:
                raise BadRequest(
                    f"{field} has {size} bytes: more than this model's context of "
                    f"{self.context_length} tokens can hold",
                    field,
                )

    def check_rids(self, rids: list[str]) -> None:
        """Every rid of a batch new and distinct, checked before any of them is queued."""
        if len(set(rids)) != len(rids):
            raise BadRequest("rid: the ids of one batch must be distinct", "rid")
        for rid in rids:
            if not isinstance(rid, str) or not rid:
                raise BadRequest("rid must be a non-empty string", "rid")
            if rid in self.states:
                raise BadRequest(f"rid {rid!r} is already in use", "rid")

    def submit(
        self,
        rid,
        input_ids,
        params,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        stream=False,
    ) -> ReqState:
        self.check_rids([rid])
        check_logprob_args(len(input_ids), logprob_start_len, top_logprobs_num)
        route = self.router.route(input_ids)
        state = ReqState(rid, len(input_ids), params, return_logprob, top_logprobs_num)
        state.worker = route.worker
        message = TokenizedGenerateReq(
            rid, input_ids, params, return_logprob, logprob_start_len, top_logprobs_num, stream
        )
        self.states[rid] = state
        try:
            self.sends[route.worker].send_pyobj(message)
        except BaseException:  # not sent (e.g. a value pickle cannot write): forget it
            self._retire(state)
            raise
        if self.num_workers > 1:
            self.metrics.routed(route.worker, route.reason, self.router.in_flight)
        self.metrics.requests.inc()
        self.metrics.prompt_tokens.inc(len(input_ids))
        return state

    async def wait_result(self, state: ReqState, is_disconnected=None) -> GenerationResult:
        """Wait for the request to finish; aborts it if the client goes away."""
        async for _ in self.stream(state, is_disconnected):
            pass
        state.raise_error()
        if not state.finished:
            raise ClientGone(state.rid)
        return state.result

    async def wait_started(self, states: list[ReqState], is_disconnected=None) -> None:
        """Wait until every request has produced output or failed, so that a stream starts
        only once its requests run; a failure aborts the others and raises."""
        try:
            for state in states:
                while state.result is None and not state.finished:
                    try:
                        await asyncio.wait_for(state.changed.wait(), timeout=1.0)
                    except asyncio.TimeoutError:
                        if is_disconnected is not None and await is_disconnected():
                            raise ClientGone(state.rid) from None
                state.raise_error()
        except BaseException:
            for state in states:
                self.abort(state.rid)
            raise

    async def stream(self, state: ReqState, is_disconnected=None) -> AsyncIterator[str]:
        """Yield text deltas as they arrive; ends when the request finishes."""
        try:
            sent = 0
            while True:
                try:
                    await asyncio.wait_for(state.changed.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    if is_disconnected is not None and await is_disconnected():
                        self.abort(state.rid)
                        return
                    continue
                state.changed.clear()
                if len(state.text) > sent:
                    yield state.text[sent:]
                    sent = len(state.text)
                if state.finished:
                    return
        except asyncio.CancelledError:
            self.abort(state.rid)  # the client disconnected mid-stream
            raise

    def check_prompt(self, ids: list[int], field: str, context_check: bool = True) -> None:
        """Reject out-of-range token ids and prompts that leave no room in the context (400 early,
        before the scheduler sees them)."""
        vocab = len(self.tokenizer)
        if any(not isinstance(t, int) or t < 0 or t >= vocab for t in ids):
            raise BadRequest(f"{field}: token ids must lie in [0, {vocab})", field)
        if context_check and len(ids) >= self.context_length:
            raise BadRequest(
                f"{field} has {len(ids)} tokens; this model's context is {self.context_length}",
                field,
            )

    async def merge_streams(self, states: list[ReqState]) -> AsyncIterator[tuple[int, str]]:
        """(choice index, text delta) from several requests as they arrive; None delta = done."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, state: ReqState):
            try:
                async for delta in self.stream(state):
                    await queue.put((i, delta))
            finally:
                await queue.put((i, None))

        tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(states)]
        try:
            done = 0
            while done < len(states):
                i, delta = await queue.get()
                done += delta is None
                yield i, delta
        finally:
            for t in tasks:
                t.cancel()
            for s in states:
                if not s.finished:
                    self.abort(s.rid)

    def abort(self, rid: str) -> None:
        """Ask the scheduler to stop a request; its waiter gets an "abort" finish reason."""
        state = self.states.get(rid)
        if state is not None and not state.finished:
            self.sends[state.worker].send_pyobj(AbortReq(rid))
            self.metrics.aborted.inc()

    def end_all(self, message: str) -> int:
        """End every request still running with `message` (HTTP 503; a stream that started gets
        a last event with finish reason abort), and abort them in the scheduler. Returns how
        many there were."""
        return self._end([s for s in self.states.values() if not s.finished], message)

    def fail_worker(self, worker: int, message: str) -> None:
        """A worker died and the server stops: end its requests with `message` and the other
        workers' with a shutdown notice (HTTP 503) before the connections close. Safe from
        any thread."""

        def end() -> None:
            self._end([s for s in self.states.values() if s.worker == worker], message)
            self._end(list(self.states.values()), f"the server shut down: {message}")

        if self._loop is not None:
            self._loop.call_soon_threadsafe(end)

    def _end(self, pending: list[ReqState], message: str) -> int:
        for state in pending:
            self.abort(state.rid)
            state.error, state.error_status = message, 503
            state.start_result(state.prompt_len, 0)
            state.result.finish_reason = {"type": "abort", "message": message}
            state.finished = True
            self._retire(state)
            state.changed.set()
        return len(pending)

    def _retire(self, state: ReqState) -> None:
        """The request ended: forget it (waiters hold the state itself), free its worker slot."""
        if self.states.pop(state.rid, None) is not None:
            self.router.release(state.worker)
            if self.num_workers > 1:
                self.metrics.in_flight(state.worker, self.router.in_flight[state.worker])

    async def flush_cache(self) -> bool:
        """Flush every worker's cache; True only if all of them flushed (a worker with
        requests running refuses)."""
        loop = asyncio.get_running_loop()
        futures = []
        for worker, sock in enumerate(self.sends):
            fut = loop.create_future()
            self._flush_waiters[worker].append(fut)
            futures.append(fut)
            sock.send_pyobj(FlushCacheReq())
        flushed = await asyncio.gather(*futures)
        for worker, ok in enumerate(flushed):
            if ok:
                self.router.clear(worker)
        return all(flushed)

    # ---- results from the detokenizer --------------------------------------------------
    async def _handle_loop(self) -> None:
        while True:
            msg = await self.recv.recv_pyobj()
            try:
                self._handle(msg)
            except Exception:  # one bad message must not stop every later result
                logger.exception("handling a message from the detokenizer failed")

    def _handle(self, msg) -> None:
        if isinstance(msg, FlushCacheResp):
            waiters = self._flush_waiters[msg.worker]
            if waiters and not (fut := waiters.pop(0)).done():  # done: the caller left
                fut.set_result(msg.success)
            return
        if not isinstance(msg, BatchStrOut):
            return
        if msg.stats:
            self.update_stats(msg.worker, msg.stats)
        now = time.perf_counter()
        for item in msg.outputs:
            state = self.states.get(item.out.rid)
            if state is not None:
                self._apply(state, item, now)

    def _apply(self, state: ReqState, item, now: float) -> None:
        out = item.out
        if out.error:
            state.error, state.error_status = out.error, out.error_status or 400
            if out.finish_reason is None:  # failed after the scheduler: stop it there too
                self.abort(state.rid)
                out.finish_reason = {"type": "abort", "message": out.error}
        state.text += item.text_delta
        before = len(state.output_ids)
        if 0 <= out.output_offset < before:  # a jump-forward replaced tokens already received
            del state.output_ids[out.output_offset :]
        state.output_ids.extend(out.new_ids)
        grown = len(state.output_ids) - before
        if grown > 0:
            if state.first_token_at is None:
                state.first_token_at = now
                self.metrics.ttft.observe(now - state.created)
            elif state.last_token_at is not None:
                self.metrics.itl.observe((now - state.last_token_at) / grown)
            state.last_token_at = now
            self.metrics.generation_tokens.inc(grown)
        res = state.start_result(out.prompt_tokens, out.cached_tokens)
        res.text, res.output_ids = state.text, state.output_ids
        res.cached_tokens = out.cached_tokens
        res.jump_forward_tokens = out.jump_forward_tokens
        res.output_token_logprobs += out.output_token_logprobs
        res.output_top_logprobs += out.output_top_logprobs
        if out.input_token_logprobs is not None:
            res.input_token_logprobs = out.input_token_logprobs
            res.input_top_logprobs = out.input_top_logprobs
        if out.finish_reason is not None:
            state.finished = True
            self._retire(state)
            res.finish_reason = out.finish_reason
            res.e2e_latency = now - state.created
            if state.first_token_at is not None:
                res.ttft = state.first_token_at - state.created
            self.metrics.e2e.observe(now - state.created)
        state.changed.set()
