"""Continuous batching: admit waiting requests, plan one ragged forward, sample, retire.

Every step may mix prefill chunks of some requests with decode tokens of others. A request's
KV covers `all_ids[:kv_len]`; a step extends it by a chunk, and when the chunk reaches the end
of the sequence the last row's logits sample the next token.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import torch

from runtime.cache.prefix_cache import NoPrefixCache, PrefixCache
from runtime.cache.radix_cache import RadixCache, common_prefix_length
from runtime.faults import inject
from runtime.model.attention.base import ForwardBatch
from runtime.model.loader import load_tokenizer, resolve_tokenizer_path
from runtime.model.parallel import ParallelConfig, TensorParallelError
from runtime.model.runner import ModelRunner
from runtime.sampling.sampler import PickedRow, fill_grammar_bitmask, prompt_logprobs, sample
from runtime.scheduler.constrained import ConstrainedSteps
from runtime.scheduler.grammar_backend import GrammarBackend
from runtime.scheduler.policy import match_len_limit, order_waiting
from runtime.scheduler.req import FinishReason, Req
from runtime.server_args import ServerArgs
from runtime.transfer import pinned_if, to_device

logger = logging.getLogger(__name__)

# Admission reserves room for running requests' future output scaled by a ratio that starts
# pessimistic, decays each step as requests finish early, and resets after a retraction.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
# A waiting request that shares at least this many uncached tokens with one admitted in the
# same step waits one step, so it reuses that request's prefix instead of recomputing it.
IN_BATCH_SHARE_MIN = 32


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
    offset: int = 0  # the chunk's first row in the batch (and in its out_cache_loc)
    made: int = 0  # output tokens of the request when this step samples (some maybe in flight)
    pending: tuple | None = None  # the last token's source while a launched step samples it
    void: bool = False  # dropped while in flight (overlap: a jump-forward changed the request)


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
    evicted_tokens: int = 0
    jump_forward_tokens: int = 0  # output tokens appended by jump-forward instead of decoded
    jump_forwards: int = 0
    overlapped_steps: int = 0  # steps launched before the one before them landed


class Scheduler(ConstrainedSteps):
    """Owns the model runner, the waiting queue and the running batch."""

    defer_picks = False  # sampled tokens are read on the host before a step returns

    def __init__(self, args: ServerArgs, parallel: ParallelConfig | None = None, on_loaded=None):
        self.args = args
        # tensor-parallel rank 0 with `parallel`; see ModelRunner for `on_loaded`
        self.runner = ModelRunner(args, parallel, on_loaded)
        self.tokenizer_folder = self.runner.model_folder
        if args.tokenizer_path is not None:
            self.tokenizer_folder = resolve_tokenizer_path(args.tokenizer_path)
        self.tokenizer = load_tokenizer(self.tokenizer_folder, args.chat_template)
        self.vocab_size = self.runner.config.vocab_size
        if len(self.tokenizer) > self.vocab_size:
            raise ValueError(
                f"tokenizer_path: the tokenizer has {len(self.tokenizer)} tokens, more than "
                f"the model's vocabulary of {self.vocab_size}"
            )
        self.eos_ids = set(self.runner.config.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.eos_ids.add(self.tokenizer.eos_token_id)
        self.context_length = self.runner.context_length
        self.grammars = GrammarBackend(
            self.tokenizer, self.vocab_size, args.json_whitespace, args.json_number_digits
        )
        self._grammar_pool: ThreadPoolExecutor | None = None
        self._grammar_kernels_at: float | None = None  # when the mask kernels became ready
        self._mask_pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")
        self.mask_words = (self.vocab_size + 31) // 32
        self.kv_pool = self.runner.kv_pool
        self.req_to_token_pool = self.runner.req_to_token_pool
        cache_cls = NoPrefixCache if args.disable_radix_cache else RadixCache
        self.cache: PrefixCache = cache_cls(self.req_to_token_pool, self.kv_pool)
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.rng = random.Random(args.random_seed)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.stats = SchedulerStats()
        torch.manual_seed(args.random_seed)

    # ---- queue ---------------------------------------------------------------------------
    def add_request(self, req: Req) -> None:
        """Queue a request; RequestError (a ValueError) names what is wrong with it. Outputs
        longer than the context leaves are clamped to it (finish reason "length")."""
        inject("admission", req.rid)
        prompt = req.origin_input_ids
        if not prompt:
            raise RequestError("the prompt is empty")
        if len(prompt) >= self.context_length:
            raise RequestError(
                f"the prompt has {len(prompt)} tokens; this model's context is {self.context_length}"
            )
        if len(prompt) + 1 > self.kv_pool.size:
            raise RequestError(
                f"the prompt has {len(prompt)} tokens; the KV pool holds {self.kv_pool.size}"
            )
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise RequestError(f"input_ids must lie in [0, {self.vocab_size})")
        sp = req.sampling_params
        sp.validate(self.vocab_size)
        room = self.context_length - len(prompt)
        if sp.max_new_tokens > room:
            req.sampling_params = sp = dataclasses.replace(
                sp, max_new_tokens=room, min_new_tokens=min(sp.min_new_tokens, room)
            )
        if sp.is_constrained:
            self._start_grammar(req)
        self.stats.prompt_tokens += len(prompt)
        self.waiting.append(req)

    def abort(self, rid: str) -> bool:
        for req in self.waiting:
            if req.rid == rid:
                self.waiting.remove(req)
                if req.grammar_future is not None:  # stop its compilation
                    req.grammar_cancel.set()
                    req.grammar_future.cancel()
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
        prompt = max(self.stats.cached_prompt_tokens + self.stats.computed_prompt_tokens, 1)
        return {
            **vars(self.stats),
            "cache_hit_rate": self.stats.cached_prompt_tokens / prompt,
            "new_token_ratio": self.new_token_ratio,
            "waiting": len(self.waiting),
            "running": len(self.running),
            "kv_pool_size": self.kv_pool.size,
            "kv_free": self.kv_pool.available(),
            "tree_tokens": self.cache.total_size(),
            "evictable": self.cache.evictable_size(),
            "protected": self.cache.protected_size(),
        }

    def flush_cache(self) -> bool:
        """Drop every cached prefix; refused (False) while requests are queued or running."""
        if self.has_work():
            return False
        self.cache.reset()
        self.kv_pool.clear()
        return True

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step -------------------------------------------------------------------------
    def step(self) -> list[Req]:
        """Run one forward; returns the requests that gained tokens or finished."""
        failed = self._collect_grammars()
        self._admit()
        plan = self._plan()
        if not plan:
            self._wait_for_grammars()
            return failed
        batch = self._build_batch(plan)
        # constrained rows' masks are filled while the forward pass runs
        sampling = [p for p in plan if p.sample_row is not None]
        bitmask = self._start_masks(sampling)
        try:
            results = self._results(plan, sampling, self.runner.forward(batch), bitmask)
        except Exception as exc:  # fail this step's requests, keep serving the others
            return failed + self._fail(plan, batch.out_cache_loc, bitmask, exc)
        return failed + self._apply(plan, results, batch.out_cache_loc)

    def _wait_for_grammars(self) -> None:
        """With nothing to run: wait a little for a compiling grammar instead of spinning."""
        compiling = [r.grammar_future for r in self.waiting if r.grammar_future is not None]
        if compiling:
            wait(compiling, timeout=0.05, return_when=FIRST_COMPLETED)

    def _masks(self, sampling: list[_Planned]) -> torch.Tensor | None:
        """The grammar bitmask of sampling rows (None where none is constrained); rows dropped
        while their step ran (overlap) are left unconstrained."""
        matchers = [
            None if p.void or p.req.req_pool_idx is None else p.req.grammar for p in sampling
        ]
        return fill_grammar_bitmask(matchers, self.mask_words, pinned_if(self.runner.device))

    def _start_masks(self, sampling: list[_Planned]) -> Future | None:
        """_masks filled in the mask thread, or None where no row is constrained."""
        if all(p.req.grammar is None for p in sampling):
            return None
        return self._mask_pool.submit(self._masks, sampling)

    def _fail(self, plan: list[_Planned], slots: torch.Tensor, bitmask, exc: Exception):
        logger.exception("a forward pass failed", exc_info=exc)
        if isinstance(bitmask, Future):
            wait([bitmask])  # the matchers must not change under the mask thread
        self.kv_pool.free(slots)
        failed = []
        for p in plan:
            if not p.void:
                self._landed(p)
            if not p.req.finished:
                p.req.finished_reason = FinishReason.failed(f"internal error: {exc}", 500)
                self._retire(p.req)
                failed.append(p.req)
        if isinstance(exc, TensorParallelError):  # the ranks cannot run another step
            raise exc
        return failed

    # ---- admission ---------------------------------------------------------------------------
    def _future_tokens(self, req: Req) -> float:
        """KV slots a running request is expected to need: its unprefilled part plus its
        remaining output scaled by the new-token ratio (most requests stop early)."""
        final = min(
            len(req.origin_input_ids) + req.sampling_params.max_new_tokens, self.context_length
        )
        remaining_out = max(final - max(req.seq_planned, req.kv_planned), 0)
        return max(req.seq_len - req.kv_planned, 0) + remaining_out * self.new_token_ratio

    def _admit(self) -> None:
        if not self.waiting or len(self.running) >= self.args.max_running_requests:
            return
        reserved = sum(self._future_tokens(r) for r in self.running)
        pending_prefill = sum(
            r.seq_len - r.kv_planned for r in self.running if r.seq_len - r.kv_planned > 1
        )
        # prompts whose uncached part is being computed: admitted in this step, or with a
        # prefill chunk in flight (overlap: its KV reaches the tree when the chunk lands)
        admitted_prompts = [
            r.origin_input_ids
            for r in self.running
            if r.inflight_kv and r.kv_len < len(r.origin_input_ids)
        ]
        for req in order_waiting(self.args.schedule_policy, self.waiting, self.cache, self.rng):
            if len(self.running) >= self.args.max_running_requests:
                break
            if pending_prefill >= self.args.max_prefill_tokens:
                break
            if req.grammar_future is not None:
                continue  # its grammar is still compiling
            cached, node = self.cache.match_prefix(req.all_ids[: match_len_limit(req)])
            if self._shares_uncached_prefix(req, len(cached), admitted_prompts):
                continue  # admitted next step, when the sibling's prefix is in the tree
            free = self.kv_pool.available() + self.cache.evictable_size() - reserved
            need = self._future_tokens(req) - len(cached)
            if need > free and self.running:
                break
            row = self.req_to_token_pool.alloc()
            if row is None:
                break
            self.waiting.remove(req)
            req.req_pool_idx = row
            self._attach_prefix(req, cached, node)
            reserved += self._future_tokens(req)
            pending_prefill += req.seq_len - req.kv_len
            admitted_prompts.append(req.all_ids)
            self.running.append(req)

    @staticmethod
    def _shares_uncached_prefix(req: Req, cached: int, admitted: list[list[int]]) -> bool:
        ids = req.all_ids
        return any(
            common_prefix_length(ids, other) - cached >= IN_BATCH_SHARE_MIN for other in admitted
        )

    def _attach_prefix(self, req: Req, cached: torch.Tensor, node) -> None:
        """Point the request at the cached prefix of it and lock that prefix."""
        n = len(cached)
        self.req_to_token_pool.req_to_token[req.req_pool_idx, :n] = cached.to(torch.int32)
        self.cache.lock(node)
        req.last_node, req.prefix_len, req.kv_len = node, n, n
        if not req.admitted_before:
            req.cached_tokens = n
            req.admitted_before = True
            self.stats.cached_prompt_tokens += n
        if req.logprob_start_len == 0 and not req.input_token_logprobs:
            req.input_token_logprobs.append((None, req.origin_input_ids[0]))
            req.input_top_logprobs.append(None)

    # ---- memory ------------------------------------------------------------------------------
    def _make_room(self, needed: int) -> bool:
        """Evict cached prefixes until `needed` slots are free; False if that is impossible."""
        short = needed - self.kv_pool.available()
        if short > 0:
            self.stats.evicted_tokens += self.cache.evict(short)
        return self.kv_pool.available() >= needed

    def _retract_for_decode(self) -> None:
        """When the next decode step cannot get one slot per request, send back the requests
        that lose least (fewest generated tokens); they resume later from the cache."""
        while True:
            decoding = [r for r in self.running if self._decodes(r)]
            if self._make_room(len(decoding)) or not decoding:
                return
            if len(self.running) == 1:
                req = self.running[0]
                req.finished_reason = FinishReason(
                    "abort", message="the KV cache cannot hold this request"
                )
                self._retire(req)
                return
            victim = min(self.running, key=lambda r: (len(r.output_ids), -r.seq_len))
            self._retract(victim)

    def _retract(self, req: Req) -> None:
        self.running.remove(req)
        self.cache.cache_finished_req(req)
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx, req.kv_len = None, 0
        self.waiting.insert(0, req)
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.stats.retractions += 1

    # ---- planning ----------------------------------------------------------------------------
    def _decodes(self, req: Req) -> bool:
        """Whether the request's next step is one token (a launched step may be sampling
        it: then not if that token is the last the request may have)."""
        if req.seq_planned - req.kv_planned != 1:
            return False
        limit = req.sampling_params.max_new_tokens
        return not req.inflight_out or (
            req.out_planned < limit and req.seq_planned < self.context_length
        )

    def _plan(self) -> list[_Planned]:
        self._retract_for_decode()
        plan = [_Planned(r, r.kv_planned, 1) for r in self.running if self._decodes(r)]
        memory = self.kv_pool.available() + self.cache.evictable_size() - len(plan)
        budget = self.args.max_prefill_tokens
        chunk_cap = self.args.chunked_prefill_size if self.args.chunked_prefill_size > 0 else None
        for req in self.running:
            remaining = req.seq_len - req.kv_planned
            if remaining <= 1:
                continue
            n = min(remaining, budget, memory, chunk_cap or remaining)
            if n <= 0:
                break
            plan.append(_Planned(req, req.kv_planned, n))
            budget -= n
            memory -= n
        self.new_token_ratio = max(
            self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO
        )
        return plan

    def _build_batch(self, plan: list[_Planned]) -> ForwardBatch:
        total = sum(p.length for p in plan)
        if not self._make_room(total):
            raise RuntimeError(f"KV pool cannot supply {total} slots after eviction")
        slots = self.kv_pool.alloc(total)  # on the device, like the pool
        ids, positions, logit_rows = [], [], []
        offset = 0
        for p in plan:
            req, end = p.req, p.start + p.length
            p.offset, p.made = offset, req.out_planned
            known = req.ids_between(p.start, end)
            ids.extend(known)
            if len(known) < p.length:  # a launched step samples it: filled in when it lands
                p.pending = req.pending_src
                ids.append(0)
            positions.extend(range(p.start, end))
            prompt_len = len(req.origin_input_ids)
            if req.logprob_start_len >= 0:
                lo = max(p.start, req.logprob_start_len + len(req.input_token_logprobs) - 1)
                for pos in range(lo, min(end, prompt_len - 1)):
                    p.logprob_rows.append(len(logit_rows))
                    p.logprob_targets.append(req.origin_input_ids[pos + 1])
                    logit_rows.append(offset + pos - p.start)
            if end == req.seq_planned and req.sampling_params.max_new_tokens > p.made:
                p.sample_row = len(logit_rows)
                logit_rows.append(offset + p.length - 1)
                req.inflight_out += 1
            req.inflight_kv += p.length
            offset += p.length
        requests = [(p.req.req_pool_idx, p.length, p.start + p.length) for p in plan]
        batch = ForwardBatch.from_host(
            self.runner.device, ids, positions, slots, logit_rows, requests
        )
        table = self.req_to_token_pool.req_to_token  # each new token's slot, in one write:
        table.index_put_((batch.token_rows(), batch.positions), slots.to(torch.int32))
        return batch

    def _results(
        self, plan: list[_Planned], sampling: list[_Planned], logits: torch.Tensor, bitmask
    ) -> tuple:
        """What a step's logits give: each chunk's prompt logprobs (or None) and the tokens
        of its `sampling` chunks (those with a sample_row). Reads no request state that
        landing a step changes."""
        prompt = []
        for p in plan:
            if not p.logprob_rows:
                prompt.append(None)
                continue
            rows, targets = to_device(logits.device, [p.logprob_rows, p.logprob_targets])
            prompt.append(prompt_logprobs(logits[rows], targets, p.req.top_logprobs_num))
        self.stats.forward_steps += 1
        return prompt, self._sample(sampling, logits, bitmask)

    @staticmethod
    def _landed(p: _Planned) -> None:
        p.req.inflight_kv -= p.length
        if p.sample_row is not None:
            p.req.inflight_out -= 1

    def _apply(self, plan: list[_Planned], results: tuple, slots: torch.Tensor) -> list[Req]:
        """Land a step: the requests' KV, tokens, finishes. A request retired while the
        step ran (overlap) gives its rows' slots back."""
        now = time.perf_counter()
        touched = []
        prompt, samples = results
        for p, logprobs in zip(plan, prompt):
            if not p.void:
                self._landed(p)
            if p.void or p.req.req_pool_idx is None:  # retired or changed while the step ran
                self.kv_pool.free(slots[p.offset : p.offset + p.length])
                continue
            p.req.kv_len = p.start + p.length
            if p.start < len(p.req.origin_input_ids):
                self.stats.computed_prompt_tokens += min(
                    p.length, len(p.req.origin_input_ids) - p.start
                )
            if logprobs is not None:
                chosen, top = logprobs
                p.req.input_token_logprobs.extend(zip(chosen, p.logprob_targets))
                p.req.input_top_logprobs.extend(top if top is not None else [None] * len(chosen))
        for p, (token, logprob, top) in samples:
            req = p.req
            if p.void or req.req_pool_idx is None:
                continue
            if token is None:  # sampling failed for this request alone
                req.finished_reason = FinishReason.failed("internal error while sampling", 500)
                touched.append(req)
                continue
            req.output_ids.append(token)
            self._accept_grammar(req, token)
            if req.first_token_at is None:
                req.first_token_at = now
            if logprob is not None and req.return_logprob:
                req.output_token_logprobs.append((logprob, token))
                if req.top_logprobs_num:
                    req.output_top_logprobs.append(top)
            self.stats.generated_tokens += 1
            if not req.finished:
                self._check_finished(req)
            if not req.finished:
                self._jump_forward(req)
            touched.append(req)
        for p in plan:
            req = p.req
            if p.void or req.req_pool_idx is None:
                continue
            if p.sample_row is None and req.kv_len == req.seq_len:  # max_new_tokens reached or 0
                req.finished_reason = FinishReason("length", length=len(req.output_ids))
                touched.append(req)
            if req.finished:
                req.finished_at = now
                self._retire(req)
            elif p.length > 1:
                self.cache.cache_unfinished_req(req)  # share the new prefix right away
        return touched

    def _sample(self, sampling: list[_Planned], logits: torch.Tensor, bitmask=None):
        """(planned, (token, logprob, top logprobs)) per sampling request. The batch samples in
        one call, with the grammar bitmask filled during the forward pass (a Future); if that
        fails, each request samples alone (with its row of the mask) and those that still fail
        get token None (their landing ends them with an internal error) instead of taking the
        batch down. Rows dropped while the step ran (overlap) do not sample."""
        if not sampling:
            return []
        if isinstance(bitmask, Future):  # settled first: overlap voids rows until it is
            try:
                bitmask = bitmask.result()
            except Exception:
                logger.exception("filling the grammar masks failed")
                bitmask = None  # each row fills its own
        keep = [i for i, p in enumerate(sampling) if not p.void and p.req.req_pool_idx is not None]
        if len(keep) < len(sampling):
            masks = None if bitmask is None else bitmask[keep]
            picked = self._sample([sampling[i] for i in keep], logits, masks)
            out = dict(zip(keep, (result for _, result in picked)))
            return [(p, out.get(i, (None, None, None))) for i, p in enumerate(sampling)]
        try:
            return list(zip(sampling, self._sample_rows(sampling, logits, bitmask)))
        except Exception:
            if len(sampling) == 1:
                logger.exception("sampling failed for %s", sampling[0].req.rid)
                return [(sampling[0], (None, None, None))]
            masks = [None if bitmask is None else bitmask[i : i + 1] for i in range(len(sampling))]
            return [pair for p, m in zip(sampling, masks) for pair in self._sample([p], logits, m)]

    def _sample_rows(self, sampling: list[_Planned], logits: torch.Tensor, bitmask) -> list:
        reqs = [p.req for p in sampling]
        for req in reqs:
            inject("sampling", req.rid)
        if bitmask is None:
            bitmask = self._masks(sampling)
        rows, made = [p.sample_row for p in sampling], [p.made for p in sampling]
        out = sample(logits, reqs, self.eos_ids, bitmask, rows, made, self.defer_picks)
        if self.defer_picks:  # read on the host when the step lands
            return [PickedRow(out, i) for i in range(len(reqs))]
        return [out.row(i) for i in range(len(reqs))]

    def _check_finished(self, req: Req) -> None:
        sp, last = req.sampling_params, req.output_ids[-1]
        n_out = len(req.output_ids)
        ended = req.grammar is not None and req.grammar.is_terminated()  # nothing may follow
        if ended or (last in self.eos_ids and not sp.ignore_eos) or last in sp.stop_token_ids:
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
            self._release_row(req, req.req_pool_idx)
            req.req_pool_idx = None
        if req.finished_reason is not None and req.finished_reason.type != "abort":
            self.stats.finished_requests += 1

    def _release_row(self, req: Req, row: int) -> None:
        self.req_to_token_pool.free(row)
