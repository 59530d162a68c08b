"""Continuous batching: admit waiting requests, plan one ragged forward, sample, retire.

Every step may mix prefill chunks of some requests with decode tokens of others. A request's
KV covers `all_ids[:kv_len]`; a step extends it by a chunk, and when the chunk reaches the end
of the sequence the last row's logits sample the next token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch

from runtime.attention import ForwardBatch
from runtime.model_loader import load_tokenizer
from runtime.model_runner import ModelRunner
from runtime.prefix_cache import NoPrefixCache, PrefixCache
from runtime.request import FinishReason, Req
from runtime.sampler import prompt_logprobs, sample
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request the scheduler cannot run (too long, bad token ids)."""


@dataclass
class _Planned:
    req: Req
    start: int  # first position of the chunk
    length: int  # tokens in the chunk
    sample_row: int | None = None  # row of the step's logits that samples the next token
    logprob_rows: list[int] = field(default_factory=list)
    logprob_targets: list[int] = field(default_factory=list)


@dataclass
class SchedulerStats:
    forward_steps: int = 0
    prompt_tokens: int = 0
    computed_prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    finished_requests: int = 0
    aborted_requests: int = 0
    retractions: int = 0


class Scheduler:
    """Owns the model runner, the waiting queue and the running batch."""

    def __init__(self, args: ServerArgs):
        self.args = args
        self.runner = ModelRunner(args)
        self.tokenizer = load_tokenizer(self.runner.model_folder)
        self.vocab_size = self.runner.config.vocab_size
        self.eos_ids = set(self.runner.config.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.eos_ids.add(self.tokenizer.eos_token_id)
        self.context_length = self.runner.context_length
        self.kv_pool = self.runner.kv_pool
        self.req_to_token_pool = self.runner.req_to_token_pool
        self.cache: PrefixCache = NoPrefixCache(self.req_to_token_pool, self.kv_pool)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.stats = SchedulerStats()
        torch.manual_seed(args.random_seed)

    # ---- queue ---------------------------------------------------------------------------
    def add_request(self, req: Req) -> None:
        prompt = req.origin_input_ids
        if not prompt:
            raise RequestError("the prompt is empty")
        if len(prompt) >= self.context_length:
            raise RequestError(
                f"the prompt has {len(prompt)} tokens; this model's context is {self.context_length}"
            )
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise RequestError(f"input_ids must lie in [0, {self.vocab_size})")
        req.sampling_params.validate(self.vocab_size)
        self.stats.prompt_tokens += len(prompt)
        self.waiting.append(req)

    def abort(self, rid: str) -> bool:
        for req in self.waiting:
            if req.rid == rid:
                self.waiting.remove(req)
                req.finished_reason = FinishReason("abort", message="aborted")
                self.stats.aborted_requests += 1
                return True
        for req in self.running:
            if req.rid == rid:
                req.finished_reason = FinishReason("abort", message="aborted")
                self._retire(req)
                self.stats.aborted_requests += 1
                return True
        return False

    def get_stats(self) -> dict:
        """Counters plus the state of KV memory."""
        return {
            **vars(self.stats),
            "waiting": len(self.waiting),
            "running": len(self.running),
            "kv_pool_size": self.kv_pool.size,
            "kv_free": self.kv_pool.available(),
            "tree_tokens": self.cache.total_size(),
            "evictable": self.cache.evictable_size(),
            "protected": self.cache.protected_size(),
        }

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step -------------------------------------------------------------------------
    def step(self) -> list[Req]:
        """Run one forward; returns the requests that gained tokens or finished."""
        self._admit()
        plan = self._plan()
        if not plan:
            return []
        batch = self._build_batch(plan)
        logits = self.runner.forward(batch)
        self.stats.forward_steps += 1
        return self._process(plan, logits)

    def _reserved_tokens(self, req: Req) -> int:
        """KV slots a request may still need before it finishes."""
        final = min(len(req.origin_input_ids) + req.sampling_params.max_new_tokens, self.context_length)
        return max(final - req.kv_len, 0)

    def _admit(self) -> None:
        free = self.kv_pool.available() + self.cache.evictable_size()
        free -= sum(self._reserved_tokens(r) for r in self.running)
        pending_prefill = sum(r.seq_len - r.kv_len for r in self.running if r.seq_len - r.kv_len > 1)
        while self.waiting and len(self.running) < self.args.max_running_requests:
            req = self.waiting[0]
            need = self._reserved_tokens(req)
            if need > free or pending_prefill >= self.args.max_prefill_tokens:
                break
            row = self.req_to_token_pool.alloc()
            if row is None:
                break
            self.waiting.pop(0)
            req.req_pool_idx = row
            self._attach_prefix(req)
            free -= need
            pending_prefill += req.seq_len - req.kv_len
            self.running.append(req)

    def _attach_prefix(self, req: Req) -> None:
        """Point the request at whatever prefix of it the cache holds."""
        req.kv_len = 0
        if req.logprob_start_len == 0 and not req.input_token_logprobs:
            req.input_token_logprobs.append((None, req.origin_input_ids[0]))
            req.input_top_logprobs.append(None)

    def _plan(self) -> list[_Planned]:
        plan, budget = [], self.args.max_prefill_tokens
        chunk_cap = self.args.chunked_prefill_size if self.args.chunked_prefill_size > 0 else None
        for req in self.running:
            remaining = req.seq_len - req.kv_len
            if remaining == 1:
                plan.append(_Planned(req, req.kv_len, 1))
        for req in self.running:
            remaining = req.seq_len - req.kv_len
            if remaining <= 1:
                continue
            if budget <= 0:
                break
            n = min(remaining, budget, chunk_cap or remaining)
            plan.append(_Planned(req, req.kv_len, n))
            budget -= n
        return plan

    def _build_batch(self, plan: list[_Planned]) -> ForwardBatch:
        total = sum(p.length for p in plan)
        slots = self.kv_pool.alloc(total)
        if slots is None:
            raise RuntimeError("KV pool exhausted despite reservation")
        table = self.req_to_token_pool.req_to_token
        ids, positions, logit_rows = [], [], []
        offset = 0
        for p in plan:
            req, end = p.req, p.start + p.length
            ids.extend(req.all_ids[p.start : end])
            positions.extend(range(p.start, end))
            table[req.req_pool_idx, p.start : end] = slots[offset : offset + p.length].to(torch.int32)
            prompt_len = len(req.origin_input_ids)
            if req.logprob_start_len >= 0:
                lo = max(p.start, req.logprob_start_len + len(req.input_token_logprobs) - 1)
                for pos in range(lo, min(end, prompt_len - 1)):
                    p.logprob_rows.append(len(logit_rows))
                    p.logprob_targets.append(req.origin_input_ids[pos + 1])
                    logit_rows.append(offset + pos - p.start)
            if end == req.seq_len and req.sampling_params.max_new_tokens > len(req.output_ids):
                p.sample_row = len(logit_rows)
                logit_rows.append(offset + p.length - 1)
            offset += p.length
        return ForwardBatch(
            input_ids=torch.tensor(ids, dtype=torch.int64),
            positions=torch.tensor(positions, dtype=torch.int64),
            out_cache_loc=slots,
            req_pool_indices=[p.req.req_pool_idx for p in plan],
            extend_lens=[p.length for p in plan],
            seq_lens=[p.start + p.length for p in plan],
            logit_rows=torch.tensor(logit_rows, dtype=torch.int64),
        )

    def _process(self, plan: list[_Planned], logits: torch.Tensor) -> list[Req]:
        now = time.perf_counter()
        touched = []
        for p in plan:
            p.req.kv_len = p.start + p.length
            if p.start < len(p.req.origin_input_ids):
                self.stats.computed_prompt_tokens += min(p.length, len(p.req.origin_input_ids) - p.start)
            if p.logprob_rows:
                k = p.req.top_logprobs_num
                chosen, top = prompt_logprobs(logits[p.logprob_rows], p.logprob_targets, k)
                p.req.input_token_logprobs.extend(zip(chosen, p.logprob_targets))
                p.req.input_top_logprobs.extend(top if top is not None else [None] * len(chosen))
        sampling = [p for p in plan if p.sample_row is not None]
        if sampling:
            rows = torch.tensor([p.sample_row for p in sampling])
            out = sample(logits[rows], [p.req for p in sampling], self.eos_ids)
            for i, p in enumerate(sampling):
                req = p.req
                req.output_ids.append(out.next_ids[i])
                if req.first_token_at is None:
                    req.first_token_at = now
                if out.logprobs is not None and req.return_logprob:
                    req.output_token_logprobs.append((out.logprobs[i], out.next_ids[i]))
                    if req.top_logprobs_num:
                        req.output_top_logprobs.append(out.top_logprobs[i])
                self.stats.generated_tokens += 1
                self._check_finished(req)
                touched.append(req)
        for p in plan:
            req = p.req
            if p.sample_row is None and req.kv_len == req.seq_len:  # max_new_tokens reached or 0
                req.finished_reason = FinishReason("length", length=len(req.output_ids))
                touched.append(req)
            if req.finished:
                req.finished_at = now
                self._retire(req)
        return touched

    def _check_finished(self, req: Req) -> None:
        sp, last = req.sampling_params, req.output_ids[-1]
        n_out = len(req.output_ids)
        if not sp.ignore_eos and last in self.eos_ids:
            req.finished_reason = FinishReason("stop", matched=last)
        elif last in sp.stop_token_ids:
            req.finished_reason = FinishReason("stop", matched=last)
        elif n_out >= sp.max_new_tokens or req.seq_len >= self.context_length:
            req.finished_reason = FinishReason("length", length=n_out)
        elif sp.stop and n_out >= sp.min_new_tokens:
            tail_tokens = max(len(s) for s in sp.stop) + 4
            tail = self.tokenizer.decode(req.output_ids[-tail_tokens:], skip_special_tokens=False)
            for s in sp.stop:
                if s in tail:
                    req.finished_reason = FinishReason("stop", matched=s)
                    break

    def _retire(self, req: Req) -> None:
        """Release a request's KV (to the cache) and its table row."""
        if req in self.running:
            self.running.remove(req)
        if req.req_pool_idx is not None:
            self.cache.cache_finished_req(req)
            self.req_to_token_pool.free(req.req_pool_idx)
            req.req_pool_idx = None
        if req.finished_reason is not None and req.finished_reason.type != "abort":
            self.stats.finished_requests += 1
