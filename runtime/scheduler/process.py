"""The scheduler process: a ZeroMQ loop around Scheduler."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass

import zmq

from runtime.ipc import child_setup, freeze_heap, pull_socket, push_socket, wait_readable
from runtime.messages import (
    AbortReq,
    BatchTokenOut,
    FlushCacheReq,
    FlushCacheResp,
    ReqOutput,
    TokenizedGenerateReq,
)
from runtime.model.parallel import ParallelConfig, TensorParallelError
from runtime.scheduler.req import Req
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

STATS_INTERVAL = 0.5  # seconds between stats updates while requests run without output


class SchedulerLoop:
    """Receives requests, steps the scheduler, and sends every request's new tokens."""

    def __init__(
        self,
        args: ServerArgs,
        recv_path: str,
        send_path: str,
        parent_pid: int,
        worker: int = 0,
        parallel: ParallelConfig | None = None,
    ):
        from runtime.scheduler.overlap import new_scheduler

        self.worker = worker  # data-parallel rank (--dp-size), named in every message sent
        self.scheduler = new_scheduler(args, parallel)  # tensor-parallel rank 0 with `parallel`
        ctx = zmq.Context()
        self.recv = pull_socket(ctx, recv_path)
        self.send = push_socket(ctx, send_path)
        self.parent_pid = parent_pid
        self.streaming: set[str] = set()
        self.sent: dict[str, int] = {}  # rid -> output tokens already sent
        self.stats_sent_at = 0.0
        self.logged_at = time.monotonic()
        self.logged_stats = dict(self.scheduler.get_stats())

    def warm_up(self) -> None:
        from runtime.sampling.params import SamplingParams

        self.scheduler.warm_up_grammars()
        req = Req("warm-up", [1, 2, 3, 4], SamplingParams(max_new_tokens=2))
        self.scheduler.add_request(req)
        while self.scheduler.has_work():
            self.scheduler.step()

    def run_forever(self) -> None:
        while True:
            self._receive(block=not self.scheduler.has_work())
            if self.scheduler.has_work():
                touched = self.scheduler.step()
                self._send_outputs(touched)
                interval = self.scheduler.args.log_interval
                if interval > 0 and time.monotonic() - self.logged_at >= interval:
                    self._log_throughput()

    def _log_throughput(self) -> None:
        """One line of what the last interval did (as SGLang's batch logs and vLLM's stats)."""
        now, stats = time.monotonic(), self.scheduler.get_stats()
        seconds, before = now - self.logged_at, self.logged_stats
        computed = stats["computed_prompt_tokens"] - before["computed_prompt_tokens"]
        cached = stats["cached_prompt_tokens"] - before["cached_prompt_tokens"]
        logger.info(
            "%srunning %d, waiting %d | prefill %.1f tok/s, decode %.1f tok/s, jump-forward %d "
            "tok | cache hit %.0f%% | KV used %.0f%% | %d retracted",
            f"worker {self.worker}: " if self.scheduler.args.dp_size > 1 else "",
            stats["running"],
            stats["waiting"],
            computed / seconds,
            (stats["generated_tokens"] - before["generated_tokens"]) / seconds,
            stats["jump_forward_tokens"] - before["jump_forward_tokens"],
            100 * cached / max(cached + computed, 1),
            100 * (1 - stats["kv_free"] / max(stats["kv_pool_size"], 1)),
            stats["retractions"] - before["retractions"],
        )
        self.logged_at, self.logged_stats = now, dict(stats)

    def _send_batch(self, outputs: list[ReqOutput]) -> None:
        self.send.send_pyobj(BatchTokenOut(outputs, self.scheduler.get_stats(), self.worker))
        self.stats_sent_at = time.monotonic()

    def _receive(self, block: bool) -> None:
        if block:
            wait_readable(self.recv, self.parent_pid)
        outputs = []
        while True:
            try:
                msg = self.recv.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                break
            if isinstance(msg, TokenizedGenerateReq):
                out = self._add(msg)
                if out is not None:
                    outputs.append(out)
            elif isinstance(msg, AbortReq):
                req = self._find(msg.rid)
                if req is not None and self.scheduler.abort(msg.rid):
                    outputs.append(self._output(req))
            elif isinstance(msg, FlushCacheReq):
                ok = self.scheduler.flush_cache()
                self._send_batch([])  # stats first
                self.send.send_pyobj(FlushCacheResp(ok, self.worker))
        if outputs:
            self._send_batch(outputs)

    def _add(self, msg: TokenizedGenerateReq) -> ReqOutput | None:
        """Queue a request; a refused or failing one gets its error back at once."""
        try:
            req = Req(
                msg.rid,
                msg.input_ids,
                msg.sampling_params,
                msg.return_logprob,
                msg.logprob_start_len,
                msg.top_logprobs_num,
            )
            self.scheduler.add_request(req)
        except Exception as e:
            status = 400 if isinstance(e, ValueError) else 500
            if status == 500:
                logger.exception("admitting %s failed", msg.rid)
            message = str(e) if status == 400 else f"internal error: {e}"
            return ReqOutput(
                msg.rid,
                [],
                {"type": "abort", "message": message},
                len(msg.input_ids),
                0,
                0,
                error=message,
                error_status=status,
            )
        if msg.stream:
            self.streaming.add(msg.rid)
        self.sent[msg.rid] = 0
        logger.debug(
            "request %s: %d prompt tokens, max_new_tokens %d%s",
            msg.rid,
            len(msg.input_ids),
            req.sampling_params.max_new_tokens,
            ", constrained" if req.sampling_params.is_constrained else "",
        )
        return None

    def _find(self, rid: str) -> Req | None:
        for req in self.scheduler.waiting + self.scheduler.running:
            if req.rid == rid:
                return req
        return None

    def _send_outputs(self, touched: list[Req]) -> None:
        # non-streaming requests send their first tokens too, so time-to-first-token is real
        outputs = [
            self._output(r)
            for r in touched
            if r.finished or r.rid in self.streaming or (r.output_ids and not self.sent.get(r.rid))
        ]
        idle = not self.scheduler.has_work()  # the last landing freed KV: stats say so
        if outputs or idle or time.monotonic() - self.stats_sent_at > STATS_INTERVAL:
            self._send_batch(outputs)

    def _output(self, req: Req) -> ReqOutput:
        start = self.sent.get(req.rid, 0)
        if req.rewound_to is not None:  # a jump-forward retokenized tokens already sent
            start = min(start, req.rewound_to)
            req.rewound_to = None
        sp = req.sampling_params
        reason = req.finished_reason
        failed = reason is not None and reason.status is not None
        out = ReqOutput(
            rid=req.rid,
            new_ids=req.output_ids[start:],
            finish_reason=reason.to_json() if reason else None,
            prompt_tokens=len(req.origin_input_ids),
            completion_tokens=len(req.output_ids),
            cached_tokens=req.cached_tokens,
            output_offset=start,
            jump_forward_tokens=req.jump_forward_tokens,
            stop_strings=sp.stop,
            skip_special_tokens=sp.skip_special_tokens,
            no_stop_trim=sp.no_stop_trim,
            error=reason.message if failed else None,
            error_status=reason.status if failed else None,
        )
        if req.return_logprob:
            out.output_token_logprobs = req.output_token_logprobs[start:]
            out.output_top_logprobs = req.output_top_logprobs[start:]
            if start == 0:
                out.input_token_logprobs = req.input_token_logprobs
                out.input_top_logprobs = req.input_top_logprobs
        self.sent[req.rid] = len(req.output_ids)
        if req.finished:
            self.sent.pop(req.rid, None)
            self.streaming.discard(req.rid)
            logger.debug(
                "request %s finished (%s): %d output tokens, %d cached prompt tokens",
                req.rid,
                reason.type,
                len(req.output_ids),
                req.cached_tokens,
            )
        return out


def run_scheduler_process(
    args: ServerArgs,
    recv_path: str,
    send_path: str,
    ready,
    parent_pid: int,
    worker: int = 0,
    parallel: ParallelConfig | None = None,
) -> None:
    child_setup(args)
    try:
        loop = SchedulerLoop(args, recv_path, send_path, parent_pid, worker, parallel)
        loop.warm_up()
        freeze_heap("scheduler")
        sch = loop.scheduler
        logger.info(
            "%smodel %s on %s%s (%s), context %d, KV pool %d tokens%s, %s, policy %s, "
            "chunked prefill %d, jump-forward %s, JSON whitespace %s%s",
            f"worker {worker} of {args.dp_size}: " if args.dp_size > 1 else "",
            args.model_path,
            sch.runner.device,
            f" x {args.tp_size} tensor-parallel ranks" if args.tp_size > 1 else "",
            str(sch.runner.dtype).removeprefix("torch.")
            + (f"; {sch.runner.quantization} weights" if sch.runner.quantization else ""),
            sch.context_length,
            sch.kv_pool.size,
            f" ({args.kv_cache_dtype})" if args.kv_cache_dtype != "auto" else "",
            "no prefix cache" if args.disable_radix_cache else "radix cache",
            args.schedule_policy,
            args.chunked_prefill_size,
            "off" if args.disable_jump_forward else "on",
            args.json_whitespace,
            _graph_summary(sch.runner),
        )
        ready.send(
            {
                "status": "ready",
                "model_folder": sch.runner.model_folder,
                "tokenizer_folder": sch.tokenizer_folder,
                "context_length": sch.context_length,
                "vocab_size": sch.vocab_size,
                "kv_pool_size": sch.kv_pool.size,
                "stats": sch.get_stats(),
            }
        )
    except Exception:
        ready.send({"status": "error", "error": traceback.format_exc()})
        return
    try:
        loop.run_forever()
    except TensorParallelError as exc:
        logger.error("%s; the scheduler stops", exc)
        os._exit(1)
    except Exception:
        logger.error("scheduler crashed:\n%s", traceback.format_exc())
        os._exit(1)


def run_tp_rank_process(args: ServerArgs, parallel: ParallelConfig, ready) -> None:
    """A tensor-parallel rank > 0: load its shard (then say so on `ready`), meet the other
    ranks, and run the forwards rank 0 sends. It exits (code 1) when a collective fails: rank 0
    or another rank is gone."""
    from runtime.model.runner import ModelRunner

    child_setup(args)
    try:
        runner = ModelRunner(args, parallel, lambda: ready.send({"status": "ready"}))
    except Exception:
        ready.send({"status": "error", "error": traceback.format_exc()})
        os._exit(1)
    freeze_heap(f"tensor-parallel rank {parallel.tp_rank}")
    try:
        runner.serve_steps()
    except TensorParallelError as exc:
        logger.error("%s; rank %d exits", exc, parallel.tp_rank)
        os._exit(1)
    except Exception:
        logger.error(
            "tensor-parallel rank %d crashed:\n%s", parallel.tp_rank, traceback.format_exc()
        )
        os._exit(1)
    logger.debug("tensor-parallel rank %d stopped", parallel.tp_rank)


def start_tp_ranks(args: ServerArgs, parallel: ParallelConfig, ranks, name) -> list[TPRank]:
    """Start tensor-parallel ranks `ranks` (none of them 0) of the group `parallel` describes,
    process `name(rank)` each; they load at once."""
    ctx = mp.get_context("spawn")
    started = []
    for rank in ranks:
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=run_tp_rank_process,
            args=(args, dataclasses.replace(parallel, tp_rank=rank), writer),
            name=name(rank),
            daemon=True,
        )
        proc.start()
        started.append(TPRank(proc, reader, rank))
    return started


@dataclass
class TPRank:
    """A started tensor-parallel rank process and the pipe it reports its loading on."""

    proc: mp.Process
    ready: object
    rank: int
    loaded: bool = False

    def check(self, wait: bool = False) -> bool:
        """Whether it has loaded (waits for it with `wait`); RuntimeError naming it if it failed."""
        while not self.loaded:
            if self.ready.poll(1.0 if wait else 0):
                try:
                    info = self.ready.recv()
                except EOFError:  # it exited without a word
                    self.proc.join(5)
                    info = {"status": "error", "error": f"exit code {self.proc.exitcode}"}
                if info["status"] != "ready":
                    raise RuntimeError(f"{self.proc.name} failed to start:\n{info['error']}")
                self.loaded = True
            elif not self.proc.is_alive():
                raise RuntimeError(
                    f"{self.proc.name} exited with code {self.proc.exitcode} while loading"
                )
            elif not wait:
                break
        return self.loaded


def _graph_summary(runner) -> str:
    graphs = runner.decode_graphs
    return f", CUDA graphs up to batch {graphs.max_bs}" if graphs is not None else ""
