"""Output text (incremental, stop-trimmed) and the /generate response shape."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.detokenizer.incremental import IncrementalDecoder
from runtime.scheduler.req import Req


@dataclass
class GenerationResult:
    """Everything a /generate response reports about one request."""

    rid: str
    text: str
    output_ids: list[int]
    finish_reason: dict | None
    prompt_tokens: int
    cached_tokens: int
    return_logprob: bool = False
    top_logprobs_num: int = 0
    input_token_logprobs: list = field(default_factory=list)
    input_top_logprobs: list = field(default_factory=list)
    output_token_logprobs: list = field(default_factory=list)
    output_top_logprobs: list = field(default_factory=list)
    e2e_latency: float | None = None
    ttft: float | None = None
    jump_forward_tokens: int = 0

    @classmethod
    def from_req(cls, req: Req, tokenizer) -> GenerationResult:
        sp = req.sampling_params
        decoder = IncrementalDecoder(tokenizer, sp.skip_special_tokens, sp.stop, sp.no_stop_trim)
        decoder.ids = list(req.output_ids)
        reason = req.finished_reason.to_json() if req.finished_reason else None
        return cls(
            rid=req.rid,
            text=decoder.final_text(reason),
            output_ids=list(req.output_ids),
            finish_reason=reason,
            prompt_tokens=len(req.origin_input_ids),
            cached_tokens=req.cached_tokens,
            return_logprob=req.return_logprob,
            top_logprobs_num=req.top_logprobs_num,
            input_token_logprobs=req.input_token_logprobs,
            input_top_logprobs=req.input_top_logprobs,
            output_token_logprobs=req.output_token_logprobs,
            output_top_logprobs=req.output_top_logprobs,
            e2e_latency=None if req.finished_at is None else req.finished_at - req.created_at,
            ttft=None if req.first_token_at is None else req.first_token_at - req.created_at,
            jump_forward_tokens=req.jump_forward_tokens,
        )

    def to_response(self, tokenizer, return_text_in_logprobs: bool = False) -> dict:
        """{"text", "output_ids", "meta_info"} as SGLang's /generate returns it."""
        meta = {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": len(self.output_ids),
            "cached_tokens": self.cached_tokens,
            "jump_forward_tokens": self.jump_forward_tokens,
        }
        if self.e2e_latency is not None:
            meta["e2e_latency"] = self.e2e_latency
        if self.ttft is not None:
            meta["ttft"] = self.ttft
        if self.return_logprob:

            def fmt(pairs):
                return [
                    [lp, tid, tokenizer.decode([tid]) if return_text_in_logprobs else None]
                    for lp, tid in pairs
                ]

            meta["input_token_logprobs"] = fmt(self.input_token_logprobs)
            meta["output_token_logprobs"] = fmt(self.output_token_logprobs)
            if self.top_logprobs_num:
                meta["input_top_logprobs"] = [
                    None if t is None else fmt(t) for t in self.input_top_logprobs
                ]
                meta["output_top_logprobs"] = [fmt(t) for t in self.output_top_logprobs]
        return {"text": self.text, "output_ids": self.output_ids, "meta_info": meta}
