"""The response shape of /generate (and Engine.generate), built from a finished request."""

from __future__ import annotations

from runtime.request import Req


def output_text(tokenizer, req: Req) -> str:
    """Decode a request's output, trimming a matched stop token or stop string (unless asked not to)."""
    sp = req.sampling_params
    ids = req.output_ids
    reason = req.finished_reason
    matched = reason.matched if reason is not None and reason.type == "stop" else None
    if isinstance(matched, int) and not sp.no_stop_trim and ids and ids[-1] == matched:
        ids = ids[:-1]
    text = tokenizer.decode(
        ids,
        skip_special_tokens=sp.skip_special_tokens,
        spaces_between_special_tokens=sp.spaces_between_special_tokens,
    )
    if isinstance(matched, str) and not sp.no_stop_trim:
        cut = text.find(matched)
        if cut >= 0:
            text = text[:cut]
    return text


def _logprob_list(pairs, tokenizer, with_text: bool) -> list:
    if with_text:
        return [[lp, tid, tokenizer.decode([tid])] for lp, tid in pairs]
    return [[lp, tid, None] for lp, tid in pairs]


def response_dict(req: Req, text: str, tokenizer, return_text_in_logprobs: bool = False) -> dict:
    """{"text", "output_ids", "meta_info"} as SGLang's /generate returns it."""
    reason = req.finished_reason
    meta = {
        "id": req.rid,
        "finish_reason": reason.to_json() if reason else None,
        "prompt_tokens": len(req.origin_input_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
    }
    if req.finished_at is not None:
        meta["e2e_latency"] = req.finished_at - req.created_at
    if req.first_token_at is not None:
        meta["ttft"] = req.first_token_at - req.created_at
    if req.return_logprob:
        meta["input_token_logprobs"] = _logprob_list(req.input_token_logprobs, tokenizer, return_text_in_logprobs)
        meta["output_token_logprobs"] = _logprob_list(req.output_token_logprobs, tokenizer, return_text_in_logprobs)
        if req.top_logprobs_num:
            meta["input_top_logprobs"] = [
                None if top is None else _logprob_list(top, tokenizer, return_text_in_logprobs)
                for top in req.input_top_logprobs
            ]
            meta["output_top_logprobs"] = [
                _logprob_list(top, tokenizer, return_text_in_logprobs) for top in req.output_top_logprobs
            ]
    return {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}
