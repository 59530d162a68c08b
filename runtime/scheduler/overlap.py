"""Overlap scheduling: the host prepares step N+1 while the model runs step N.

Each step is launched on one forward thread, which runs the steps in order (forward, then
sampling). The scheduler plans step N+1 before step N has landed: a request decoding in both
takes, as its input in N+1, the token N samples, written into N+1's input ids on the forward
thread just before N+1 runs. Then step N lands (its tokens are appended, finished requests
retired) while N+1 runs. A request that N finishes still has a row in N+1: that row's token
is dropped and its KV slot freed when N+1 lands.

Invariants that make this safe without locks:
- Only the forward thread writes KV, and it runs steps in order, so a slot freed (or a prefix
  evicted) while N runs is rewritten by N+1 at the earliest, after N has read it.
- A request's req_to_token row is freed only after every launched step that reads it has
  landed (`_Launched.held_rows`); new rows of a running request are written at positions no
  launched step reads.
- The host never changes what the forward thread reads of a request it runs: the sampler's
  parameters are snapshot at launch (`_Planned.made`); where step N+1 samples a request whose
  token N is sampling and that has a grammar (whose mask needs that token accepted) or
  penalties (counted from the output ids on the host), N+1's sampling waits until N has
  landed (`_settle`), while its forward runs without waiting. A jump-forward at that landing
  voids the request's row in N+1 (not sampled, dropped when N+1 lands; the request extends
  from its new text in the step after). The forward thread sets nothing on requests: landing
  turns a failed sample into the request's error. Planning waits for the step in flight to
  land only where the next decode would need a retraction.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from runtime.model.attention.base import ForwardBatch
from runtime.model.runner import pick_device
from runtime.sampling.sampler import PickedRow
from runtime.scheduler.req import Req
from runtime.scheduler.scheduler import Scheduler, _Planned
from runtime.server_args import ServerArgs
from runtime.transfer import to_device

logger = logging.getLogger(__name__)


# Larger steps are launched and landed in turn. Both threads run Python under one GIL, and
# with many requests the landing and planning of one step slow the launching of the next more
# than the overlap saves: on an H200 (benchmarks/gpu_check.py, CUDA graphs, greedy decode of
# random Llama-1B / SmolLM2-135M shapes) overlapped steps gained 11% / 21% at batch 1 and 19% /
# 25% at batch 32 but lost 45% / 26% at batch 128.
OVERLAP_MAX_BATCH = 64


@dataclass(eq=False)
class _Launched:
    plan: list[_Planned]
    batch: ForwardBatch
    sampling: list[_Planned]
    bitmask: Future | None  # resolved after the step before lands when `deferred`
    deferred: bool = False
    future: Future | None = None
    held_rows: list[int] = field(default_factory=list)  # freed once this step has landed
    voided: set = field(default_factory=set)  # requests whose rows were voided


class OverlapScheduler(Scheduler):
    """Scheduler whose step() launches the next forward before landing the one in flight."""

    defer_picks = True  # the forward thread never waits for the device: landing reads them

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a new thread starts with OpenMP's default team size: give it torch's setting
        threads = torch.get_num_threads()
        self._forward_thread = ThreadPoolExecutor(
            1, "forward", initializer=torch.set_num_threads, initargs=(threads,)
        )
        self._inflight: _Launched | None = None
        self._drained: list[Req] = []  # landed while planning, returned by that step

    def has_work(self) -> bool:
        return super().has_work() or self._inflight is not None

    def drain(self) -> list[Req]:
        launched, self._inflight = self._inflight, None
        return [] if launched is None else self._land(launched)

    def step(self) -> list[Req]:
        touched = self._collect_grammars()
        self._admit()
        if self._inflight is not None and len(self.running) > OVERLAP_MAX_BATCH:
            self._drained += self.drain()  # a large batch: one step at a time from here
        plan = self._plan()
        touched += self._drained
        self._drained = []
        previous = self._inflight
        self._inflight = self._launch(plan) if plan else None
        if previous is not None:
            try:
                touched += self._land(previous)
            finally:
                if self._inflight is not None and self._inflight.deferred:
                    self._settle(self._inflight)
        elif not plan:
            self._wait_for_grammars()
        launched = self._inflight
        if launched is not None and (
            len(launched.plan) > OVERLAP_MAX_BATCH  # lands now: see OVERLAP_MAX_BATCH
            or all(p.req.req_pool_idx is None for p in launched.plan)  # finished rows only
        ):
            touched += self.drain()
        return touched

    def flush_cache(self) -> bool:
        if not super().has_work():
            self.drain()  # rows of finished requests may still be in flight
        return super().flush_cache()

    def _retract_for_decode(self) -> None:
        if self._inflight is not None:  # nothing is retracted while a step of it runs
            decoding = sum(self._decodes(r) for r in self.running)
            if not self._make_room(decoding):
                self._drained += self.drain()
        super()._retract_for_decode()

    def _release_row(self, req: Req, row: int) -> None:
        launched = self._inflight  # the newest launched step: it lands last
        if launched is not None and (req.inflight_kv or req in launched.voided):
            launched.held_rows.append(row)
        else:
            super()._release_row(req, row)

    def _truncate_kv(self, req: Req, keep: int) -> None:
        """A jump-forward changed the request's text: its row in the step in flight is void."""
        launched = self._inflight
        if launched is not None:
            for p in launched.plan:
                if p.req is req and not p.void:
                    p.void = True
                    self._landed(p)
                    launched.voided.add(req)
        super()._truncate_kv(req, keep)

    # ---- launching and landing ---------------------------------------------------------------
    def _launch(self, plan: list[_Planned]) -> _Launched:
        batch = self._build_batch(plan)
        fills = [(p.offset + p.length - 1, p.pending) for p in plan if p.pending is not None]
        sampling = [p for p in plan if p.sample_row is not None]
        launched = _Launched(plan, batch, sampling, None)
        if any(p.pending is not None and self._needs_landing(p.req) for p in sampling):
            launched.bitmask, launched.deferred = Future(), True  # see _settle
        else:
            launched.bitmask = self._start_masks(sampling)
        for i, p in enumerate(sampling):
            p.req.pending_src = (launched, i)
        if fills:
            self.stats.overlapped_steps += 1
        launched.future = self._forward_thread.submit(self._run, launched, fills)
        return launched

    @staticmethod
    def _needs_landing(req: Req) -> bool:
        """Whether sampling the request needs its tokens so far landed on the host."""
        return req.grammar is not None or req.sampling_params.has_penalties

    def _settle(self, launched: _Launched) -> None:
        """Let a step launched while the step before it ran sample: its masks are filled (in
        the mask thread) now that the tokens they follow are accepted and appended."""

        def settle(done: Future) -> None:
            if done.exception() is not None:
                launched.bitmask.set_exception(done.exception())
            else:
                launched.bitmask.set_result(done.result())

        self._mask_pool.submit(self._masks, launched.sampling).add_done_callback(settle)

    def _run(self, launched: _Launched, fills: list[tuple[int, tuple]]) -> tuple:
        """On the forward thread: the pending input tokens, the forward, the sampling. Nothing
        here waits for the device: a pending token is copied on the device from the ids the
        step before picked (its host copy is read when that step lands)."""
        if fills:
            self._fill_pending(launched.batch.input_ids, fills)
        logits = self.runner.forward(launched.batch)
        return self._results(launched.plan, launched.sampling, logits, launched.bitmask)

    @staticmethod
    def _fill_pending(input_ids: torch.Tensor, fills: list[tuple[int, tuple]]) -> None:
        """Write each pending token into `input_ids` (row `dst`): the device ids its step
        picked, or 0 where that request's sampling failed (it fails as that step lands)."""
        on_device: dict[int, tuple] = {}  # id(Picks) -> (Picks, dst rows, source rows)
        on_host: list[tuple[int, int]] = []
        for dst, (source, index) in fills:
            try:  # that step ran on this thread before: its results are there
                _, samples = source.future.result()  # (prompt logprobs, samples)
                _, pick = samples[index]  # (planned, PickedRow or (token, logprob, top))
            except Exception:  # that step failed: its requests fail as it lands
                pick = (None, None, None)
            if isinstance(pick, PickedRow):
                entry = on_device.setdefault(id(pick.picks), (pick.picks, [], []))
                entry[1].append(dst)
                entry[2].append(pick.index)
            else:
                on_host.append((dst, 0 if pick[0] is None else pick[0]))
        groups = list(on_device.values())
        host_rows, host_ids = [d for d, _ in on_host], [v for _, v in on_host]
        moved = to_device(  # every row and id list in one transfer
            input_ids.device,
            [x for _, dst, src in groups for x in (dst, src)] + [host_rows, host_ids],
        )
        for i, (picks, _, _) in enumerate(groups):
            input_ids[moved[2 * i]] = picks.next_ids[moved[2 * i + 1]].to(input_ids.dtype)
        if on_host:
            input_ids[moved[-2]] = moved[-1].to(input_ids.dtype)

    def _land(self, launched: _Launched) -> list[Req]:
        """Wait for a launched step and apply it; then free the rows it was holding."""
        slots = launched.batch.out_cache_loc
        try:
            try:
                prompt, samples = launched.future.result()
                samples = [  # the picks' host copies: the one wait for the device
                    (p, pick.result() if isinstance(pick, PickedRow) else pick)
                    for p, pick in samples
                ]
            except Exception as exc:  # fail that step's requests, keep serving the others
                return self._fail(launched.plan, slots, launched.bitmask, exc)
            return self._apply(launched.plan, (prompt, samples), slots)
        finally:
            for row in launched.held_rows:
                self.req_to_token_pool.free(row)


def new_scheduler(args: ServerArgs, parallel=None, on_loaded=None) -> Scheduler:
    """The scheduler --overlap-schedule asks for (auto: overlapped with CUDA); never
    overlapped with tensor parallelism, whose ranks get each step from the scheduling thread."""
    cuda = pick_device(args.device) == "cuda"
    overlap = args.overlap_schedule == "on" or (args.overlap_schedule == "auto" and cuda)
    overlap = overlap and args.tp_size == 1
    return (OverlapScheduler if overlap else Scheduler)(args, parallel, on_loaded)
