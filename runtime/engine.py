"""The offline engine: the scheduler in this process, driven until the given requests finish."""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass

from runtime.model.parallel import (
    ParallelConfig,
    TensorParallelError,
    group_init_method,
    leave_group,
)
from runtime.outputs import GenerationResult
from runtime.sampling.params import SamplingParams
from runtime.scheduler.overlap import new_scheduler
from runtime.scheduler.process import start_tp_ranks
from runtime.scheduler.req import Req
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


@dataclass
class GenerateInput:
    """One /generate body, normalised to lists (SGLang's single-or-batch conventions)."""

    prompts: list[list[int]]
    params: list[SamplingParams]
    rids: list[str]
    is_single: bool


def normalize_generate_input(
    tokenizer,
    text: str | list[str] | None,
    input_ids: list[int] | list[list[int]] | None,
    sampling_params: dict | list[dict] | None,
    rid: str | list[str] | None = None,
) -> GenerateInput:
    """Tokenize, validate and expand `n` copies; raises ValueError naming the bad field.
    Constraints are compiled (and refused) by the scheduler."""
    if (text is None) == (input_ids is None):
        raise ValueError("exactly one of text and input_ids must be given")
    if text is not None:
        is_single = isinstance(text, str)
        texts = [text] if is_single else text
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("text must be a string or a list of strings")
        prompts = [tokenizer.encode(t, add_special_tokens=True) for t in texts]
    else:
        is_single = bool(input_ids) and all(isinstance(t, int) for t in input_ids)
        prompts = [input_ids] if is_single else input_ids
        if not isinstance(prompts, list) or not all(
            isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
            for p in prompts
        ):
            raise ValueError("input_ids must be a list of token ids or a list of such lists")
    if not prompts:
        raise ValueError("the batch is empty")
    if isinstance(sampling_params, list):
        if len(sampling_params) != len(prompts):
            raise ValueError("sampling_params: a list must have one entry per prompt")
        params = [SamplingParams.from_dict(p) for p in sampling_params]
    else:
        params = [SamplingParams.from_dict(sampling_params) for _ in prompts]
    rids = [rid] if isinstance(rid, str) else rid
    if rids is None:
        rids = [uuid.uuid4().hex for _ in prompts]
    if not isinstance(rids, list) or not all(isinstance(r, str) and r for r in rids):
        raise ValueError("rid must be a non-empty string or a list of them")
    if len(rids) != len(prompts):
        raise ValueError("rid: give one id per prompt")
    if len(set(rids)) != len(rids):
        raise ValueError("rid: the ids of one batch must be distinct")
    out_prompts, out_params, out_rids = [], [], []
    for prompt, sp, r in zip(prompts, params, rids):
        for i in range(sp.n):
            out_prompts.append(prompt)
            out_params.append(sp.for_copy(i))
            out_rids.append(r if sp.n == 1 else f"{r}-{i}")
    return GenerateInput(out_prompts, out_params, out_rids, is_single and params[0].n == 1)


class Engine:
    """`Engine(model_path="smollm2", **server_args)`; `generate` returns what /generate returns."""

    def __init__(self, **kwargs):
        self.server_args = ServerArgs(**kwargs)
        if self.server_args.dp_size > 1:
            raise ValueError(
                "dp_size > 1 needs the server (python -m runtime.launch_server --dp-size N): "
                "the offline Engine runs one scheduler in this process"
            )
        logging.basicConfig(level=self.server_args.log_level.upper())
        if self.server_args.cpu_threads is not None:
            import torch

            torch.set_num_threads(self.server_args.cpu_threads)
        self._ranks = []
        parallel = self._start_ranks()
        try:
            self.scheduler = new_scheduler(
                self.server_args, parallel, lambda: [r.check(wait=True) for r in self._ranks]
            )
        except BaseException:
            self._stop_ranks()
            raise
        self.tokenizer = self.scheduler.tokenizer

    def _start_ranks(self) -> ParallelConfig | None:
        """With tp_size > 1: start ranks 1.. in child processes; this process is rank 0."""
        args = self.server_args
        if args.tp_size == 1:
            return None
        if args.nnodes > 1:
            raise ValueError("the offline Engine runs on one node: nnodes must be 1")
        init = group_init_method(args.dist_init_addr)
        parallel = ParallelConfig(0, args.tp_size, init, args.tp_size)
        self._ranks = start_tp_ranks(
            args, parallel, range(1, args.tp_size), lambda rank: f"radixgen-tp-rank-{rank}"
        )
        return parallel

    def _stop_ranks(self) -> None:
        if self._ranks:
            leave_group()
        for r in self._ranks:
            r.proc.join(timeout=10)
            if r.proc.is_alive():
                r.proc.kill()
                r.proc.join()
        self._ranks = []

    def generate(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict | list[dict] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        return_text_in_logprobs: bool = False,
        rid: str | list[str] | None = None,
    ) -> dict | list[dict]:
        if self.scheduler is None:
            raise RuntimeError("this Engine was shut down; create a new one to generate")
        batch = normalize_generate_input(self.tokenizer, prompt, input_ids, sampling_params, rid)
        reqs = [
            Req(r, p, sp, return_logprob, logprob_start_len, top_logprobs_num)
            for p, sp, r in zip(batch.prompts, batch.params, batch.rids)
        ]
        added = []
        try:
            for req in reqs:
                self.scheduler.add_request(req)
                added.append(req)
        except ValueError:
            for req in added:
                self.scheduler.abort(req.rid)
            raise
        while not all(r.finished for r in reqs):
            self.scheduler.step()
        refused = next((r for r in reqs if r.finished_reason.status == 400), None)
        if refused is not None:  # e.g. a constraint that does not compile
            raise ValueError(refused.finished_reason.message)
        outs = [
            GenerationResult.from_req(r, self.tokenizer).to_response(
                self.tokenizer, return_text_in_logprobs
            )
            for r in reqs
        ]
        return outs[0] if batch.is_single else outs

    def get_stats(self) -> dict:
        if self.scheduler is None:
            raise RuntimeError("this Engine was shut down")
        return self.scheduler.get_stats()

    def shutdown(self) -> None:
        if self.scheduler is not None and self._ranks:
            # a rank gone already makes this fail: the others then exit on their own
            with contextlib.suppress(TensorParallelError):
                self.scheduler.runner.stop_ranks()
        self._stop_ranks()
        self.scheduler = None
