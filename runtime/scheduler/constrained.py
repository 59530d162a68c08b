"""The scheduler's steps for constrained requests: grammars compiled off the step thread,
each sampled token fed to its matcher, and jump-forward over the text a grammar forces."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from runtime.faults import inject
from runtime.scheduler.compile_worker import CompileWorkerDied
from runtime.scheduler.jump_forward import jump_forward
from runtime.scheduler.req import FinishReason, Req

logger = logging.getLogger(__name__)


class ConstrainedSteps:
    """Mixed into Scheduler, whose state (grammars, cache, pools, stats) these methods use."""

    def _start_grammar(self, req: Req) -> None:
        """req.grammar_future: a grammar from the cache at once, else compiled in the grammar
        thread (a large schema must not stall the running batch), one compile at a time."""
        req.grammar_cancel = threading.Event()
        try:
            inject("grammar", req.rid)
            key = self.grammars.key(req.sampling_params)  # ValueError past the size limit
            grammar = self.grammars.cached(key)
        except Exception as exc:  # failed as a compile would, through _collect_grammars
            req.grammar_future = Future()
            req.grammar_future.set_exception(exc)
            return
        if grammar is not None:  # known: no wait behind other requests' compiles
            req.grammar_future = Future()
            req.grammar_future.set_result(grammar)
            return
        deadline = time.monotonic() + self.args.grammar_compile_timeout
        req.grammar_future = self._compile_pool().submit(
            self._compile, req.sampling_params, key, req.grammar_cancel, deadline
        )

    def _compile(self, sp, key: tuple[str, str], cancel: threading.Event, deadline: float):
        """Runs in the grammar thread. The time limit counts from the request's arrival, or
        from when the grammar kernels and the compile process became ready if that is later:
        their one-time build (numba's, over a minute on a fresh install, then read from its
        disk cache) is not the request's compile."""
        ready_at = self._ready_grammar_kernels()
        deadline = max(deadline, ready_at + self.args.grammar_compile_timeout)
        return self.grammars.compile(sp, max(deadline - time.monotonic(), 0.0), cancel, key)

    def _ready_grammar_kernels(self) -> float:
        """Builds (or loads) the mask kernels and starts the compile process, once; when both
        were ready."""
        if self._grammar_kernels_at is None:
            from grammars import warm_up

            try:
                warm_up()
            except Exception:  # each compile then builds what it needs as it goes
                logger.exception("building the grammar kernels ahead of compiles failed")
            try:
                self.grammars.worker.start()
            except Exception:  # the first compile starts it again
                logger.exception("starting the grammar compile process failed")
            self._grammar_kernels_at = time.monotonic()
        return self._grammar_kernels_at

    def warm_up_grammars(self) -> None:
        """Compile the grammar kernels and start the compile process in the background, ahead
        of the first constrained request (which would otherwise wait for them)."""
        self._compile_pool().submit(self._ready_grammar_kernels)

    def _compile_pool(self) -> ThreadPoolExecutor:
        if self._grammar_pool is None:
            self._grammar_pool = ThreadPoolExecutor(1, thread_name_prefix="grammar")
        return self._grammar_pool

    def _collect_grammars(self) -> list[Req]:
        """Give waiting requests whose grammar compiled their matcher; fail those whose grammar
        did not (returned, finished)."""
        failed = []
        for req in self.waiting:
            future = req.grammar_future
            if future is None or not future.done():
                continue
            req.grammar_future = None
            try:
                grammar = future.result()
            except ValueError as exc:  # the constraint is bad, or too costly to compile
                req.finished_reason = FinishReason.failed(str(exc), 400)
                failed.append(req)
                continue
            except Exception as exc:
                if isinstance(exc, CompileWorkerDied):  # known and explained: no traceback
                    logger.warning("%s: %s; the request fails", req.rid, exc)
                else:
                    logger.exception("compiling the grammar of %s failed", req.rid)
                req.finished_reason = FinishReason.failed(f"internal error: {exc}", 500)
                failed.append(req)
                continue
            if grammar is not None:
                req.grammar = grammar.matcher()
                self._jump_forward(req)  # the opening the grammar forces, e.g. `{"name": "`
        for req in failed:
            self.waiting.remove(req)
        return failed

    def _accept_grammar(self, req: Req, token: int) -> None:
        if req.grammar is None:
            return
        try:
            accepted = req.grammar.accept_token(token)
        except Exception as exc:
            logger.exception("the grammar of %s failed", req.rid)
            req.finished_reason = FinishReason.failed(f"internal error in the grammar: {exc}", 500)
            return
        if not accepted:
            req.finished_reason = FinishReason(
                "abort", message="the grammar refused the sampled token"
            )

    # ---- jump-forward ------------------------------------------------------------------------
    def _jump_forward(self, req: Req) -> None:
        """Append the text the request's grammar forces (runtime.scheduler.jump_forward); the
        KV of output tokens the jump replaced is released, and the next step extends."""
        if self.args.disable_jump_forward or req.grammar is None or req.return_logprob:
            return
        prompt_len = len(req.origin_input_ids)
        limit = min(req.sampling_params.max_new_tokens, self.context_length - prompt_len)
        try:
            jump = jump_forward(req, self.tokenizer, limit)
        except Exception:  # a jump is an optimisation: decode token by token instead
            logger.exception("jump-forward failed for %s", req.rid)
            return
        if jump is None:
            return
        self._truncate_kv(req, prompt_len + jump.keep)
        req.rewound_to = jump.keep if req.rewound_to is None else min(req.rewound_to, jump.keep)
        req.jump_forward_tokens += jump.added
        self.stats.jump_forward_tokens += jump.added
        self.stats.jump_forwards += 1
        self._check_finished(req)

    def _truncate_kv(self, req: Req, keep: int) -> None:
        """Forget the KV of all_ids[keep:]: slots the request owns go back to the pool; a
        shared prefix it locked past `keep` stays in the cache, locked only up to `keep`."""
        if keep >= req.kv_len or req.req_pool_idx is None:
            return
        table = self.req_to_token_pool.req_to_token
        if keep < req.prefix_len:
            slots, node = self.cache.match_prefix(req.all_ids[:keep])
            self.cache.lock(node)
            self.cache.unlock(req.last_node)
            table[req.req_pool_idx, : len(slots)] = slots.to(torch.int32)
            own_from = req.prefix_len
            req.last_node, req.prefix_len = node, len(slots)
        else:
            own_from = keep
        self.kv_pool.free(table[req.req_pool_idx, own_from : req.kv_len].long())
        req.kv_len = keep
