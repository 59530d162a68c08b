"""A generation request as the scheduler sees it."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from runtime.sampling.params import SamplingParams


@dataclass(frozen=True)
class FinishReason:
    """Why a request stopped: "stop" (eos, stop token or stop string), "length" or "abort".
    An abort with `status` failed: 400 when the request was at fault, 500 when the server was."""

    type: str
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None
    status: int | None = None

    @classmethod
    def failed(cls, message: str, status: int) -> FinishReason:
        return cls("abort", message=message, status=status)

    def to_json(self) -> dict:
        out: dict = {"type": self.type}
        if self.type == "stop":
            out["matched"] = self.matched
        elif self.type == "length":
            out["length"] = self.length
        elif self.message:
            out["message"] = self.message
        return out


class Req:
    """Token state of one request: its prompt, outputs so far, and how much of it has KV."""

    def __init__(
        self,
        rid: str,
        input_ids: list[int],
        sampling_params: SamplingParams,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
    ):
        self.rid = rid
        self.origin_input_ids = list(input_ids)
        self.output_ids: list[int] = []
        self.sampling_params = sampling_params
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len if return_logprob else -1
        self.top_logprobs_num = top_logprobs_num if return_logprob else 0
        self.req_pool_idx: int | None = None
        self.kv_len = 0  # leading tokens of all_ids whose KV is in the pool
        # Launched steps not yet landed (runtime.scheduler.overlap; 0 when steps run one by
        # one): tokens whose KV they compute after kv_len, tokens they sample after output_ids,
        # and where the last of those will be (the launched step and its sampling index).
        self.inflight_kv = 0
        self.inflight_out = 0
        self.pending_src: tuple | None = None
        self.cached_tokens = 0  # prompt tokens reused from the prefix cache
        self.prefix_len = 0  # leading KV slots that belong to the prefix cache, locked by us
        self.last_node = None  # prefix-cache handle of those slots
        self.admitted_before = False
        self.finished_reason: FinishReason | None = None
        self.grammar = None  # a grammars.GrammarMatcher when the output is constrained
        self.grammar_future = None  # its compilation, while that runs in a worker thread
        self.grammar_cancel = None  # a threading.Event that stops that compilation
        self.jump_forward_tokens = 0  # output tokens appended by jump-forward, not decoded
        self.rewound_to: int | None = None  # first output position a jump replaced, until sent
        self.generator: torch.Generator | None = None  # see generator_on
        self.input_token_logprobs: list[tuple[float | None, int]] = []
        self.input_top_logprobs: list[list[tuple[float, int]] | None] = []
        self.output_token_logprobs: list[tuple[float, int]] = []
        self.output_top_logprobs: list[list[tuple[float, int]]] = []
        self.created_at = time.perf_counter()
        self.first_token_at: float | None = None
        self.finished_at: float | None = None

    def generator_on(self, device: torch.device) -> torch.Generator | None:
        """The seeded random stream of this request on `device` (where its logits are), made
        at its first draw; None without a seed."""
        seed = self.sampling_params.seed
        if seed is None:
            return None
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device).manual_seed(seed)
        return self.generator

    @property
    def all_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    def ids_between(self, start: int, end: int) -> list[int]:
        """all_ids[start:end] without building all_ids (a decode step wants one token of a
        sequence of thousands)."""
        prompt = len(self.origin_input_ids)
        if start >= prompt:
            return self.output_ids[start - prompt : end - prompt]
        if end <= prompt:
            return self.origin_input_ids[start:end]
        return self.origin_input_ids[start:] + self.output_ids[: end - prompt]

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def kv_planned(self) -> int:
        """kv_len once the launched steps land."""
        return self.kv_len + self.inflight_kv

    @property
    def out_planned(self) -> int:
        """len(output_ids) once the launched steps land."""
        return len(self.output_ids) + self.inflight_out

    @property
    def seq_planned(self) -> int:
        return self.seq_len + self.inflight_out

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def __repr__(self) -> str:
        return f"Req(rid={self.rid!r}, prompt={len(self.origin_input_ids)}, out={len(self.output_ids)})"
