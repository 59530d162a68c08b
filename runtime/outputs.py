"""Output text (incremental, stop-trimmed) and the /generate response shape."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.request import Req


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas.

    A delta never ends inside a multi-byte character, never shows text that may still turn out
    to be the start of a stop string, and the final text is trimmed at the matched stop token
    or stop string unless `no_stop_trim` is set.
    """

    def __init__(self, tokenizer, skip_special_tokens=True, stop_strings=(), no_stop_trim=False):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop_strings = list(stop_strings)
        self.no_stop_trim = no_stop_trim
        self.ids: list[int] = []
        self.sent = 0  # characters already returned
        self.text = ""  # decoded text of ids[:read_offset]
        self.prefix_offset = 0  # decoding restarts a few tokens back, so merges stay correct
        self.read_offset = 0

    def push(self, new_ids: list[int], finish_reason: dict | None = None) -> str:
        self.ids.extend(new_ids)
        if finish_reason is not None:
            text = self.final_text(finish_reason)
        else:
            # decode only the tail: text of ids[prefix_offset:] minus that of ids[prefix_offset:read_offset]
            settled = self._decode(self.ids[self.prefix_offset : self.read_offset])
            tail = self._decode(self.ids[self.prefix_offset :])
            if tail.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its bytes
                return ""
            self.text += tail[len(settled) :]
            self.prefix_offset = max(self.read_offset - 4, 0)
            self.read_offset = len(self.ids)
            hold = max((len(s) for s in self.stop_strings), default=1) - 1
            text = self.text[: len(self.text) - hold] if hold else self.text
        delta = text[self.sent :]
        self.sent = max(self.sent, len(text))
        return delta

    def final_text(self, finish_reason: dict | None) -> str:
        matched = (
            (finish_reason or {}).get("matched")
            if (finish_reason or {}).get("type") == "stop"
            else None
        )
        ids = self.ids
        if isinstance(matched, int) and not self.no_stop_trim and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = self._decode(ids)
        if isinstance(matched, str) and not self.no_stop_trim:
            cut = text.find(matched)
            if cut >= 0:
                text = text[:cut]
        return text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)


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
        )

    def to_response(self, tokenizer, return_text_in_logprobs: bool = False) -> dict:
        """{"text", "output_ids", "meta_info"} as SGLang's /generate returns it."""
        meta = {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": len(self.output_ids),
            "cached_tokens": self.cached_tokens,
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
