"""Typed messages between the HTTP, scheduler and detokenizer processes (sent with pickle)."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.sampling.params import SamplingParams


@dataclass
class TokenizedGenerateReq:
    """HTTP -> scheduler: one request, already tokenized and validated."""

    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False


@dataclass
class AbortReq:
    rid: str


@dataclass
class FlushCacheReq:
    pass


@dataclass
class FlushCacheResp:
    success: bool
    worker: int = 0  # the data-parallel worker that answers (--dp-size)


@dataclass
class ReqOutput:
    """What one request gained in one scheduler step (token deltas, not totals)."""

    rid: str
    new_ids: list[int]  # replace the output from `output_offset` on
    finish_reason: dict | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    output_offset: int = -1  # -1: append; a jump-forward may replace tokens already sent
    jump_forward_tokens: int = 0
    output_token_logprobs: list = field(default_factory=list)
    output_top_logprobs: list = field(default_factory=list)
    input_token_logprobs: list | None = None  # sent once, with the first output
    input_top_logprobs: list | None = None
    stop_strings: list[str] = field(default_factory=list)
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    error: str | None = None  # the request failed: refused (400) or broken in the server (500)
    error_status: int | None = None


@dataclass
class BatchTokenOut:
    """Scheduler -> detokenizer: every request that changed in one step, plus engine stats."""

    outputs: list[ReqOutput]
    stats: dict | None = None
    worker: int = 0  # the data-parallel worker that sent it (--dp-size)


@dataclass
class StrOutput:
    """Detokenizer -> HTTP: a request's output so far as text."""

    out: ReqOutput
    text_delta: str


@dataclass
class BatchStrOut:
    outputs: list[StrOutput]
    stats: dict | None = None
    worker: int = 0
