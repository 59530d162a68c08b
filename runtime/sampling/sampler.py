"""Batched sampling: penalties, temperature, top-k, top-p, min-p, seeds and logprobs.

Requests with different parameters share one call; each step runs a handful of tensor ops over
the whole batch, and the sort that top-k/top-p/min-p need only for the rows that use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.scheduler.req import Req


@dataclass
class SampleOutput:
    next_ids: list[int]
    logprobs: list[float] | None  # of the chosen tokens under the model's distribution
    top_logprobs: list[list[tuple[float, int]]] | None


def apply_penalties(logits: torch.Tensor, reqs: list[Req], rows: list[int], vocab: int) -> None:
    """OpenAI frequency/presence penalties on generated tokens; repetition penalty on all tokens."""
    out_ids = [reqs[r].output_ids for r in rows]
    all_ids = [reqs[r].all_ids for r in rows]
    counts = _token_counts(out_ids, vocab)
    seen = _token_counts(all_ids, vocab) > 0
    idx = torch.tensor(rows)
    sub = logits[idx]
    freq = torch.tensor([reqs[r].sampling_params.frequency_penalty for r in rows])[:, None]
    pres = torch.tensor([reqs[r].sampling_params.presence_penalty for r in rows])[:, None]
    rep = torch.tensor([reqs[r].sampling_params.repetition_penalty for r in rows])[:, None]
    sub = sub - freq * counts - pres * (counts > 0)
    penalised = torch.where(sub > 0, sub / rep, sub * rep)
    logits[idx] = torch.where(seen, penalised, sub)


def _token_counts(id_lists: list[list[int]], vocab: int) -> torch.Tensor:
    counts = torch.zeros(len(id_lists), vocab)
    for row, ids in enumerate(id_lists):
        if ids:
            t = torch.tensor(ids)
            counts[row].index_add_(0, t, torch.ones(len(ids)))
    return counts


def _filter_probs(
    probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor
):
    """Zero the probabilities outside each row's top-k, top-p nucleus and min-p floor."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1])[None, :]
    drop = rank >= top_k[:, None]
    drop |= (sorted_p.cumsum(-1) - sorted_p) > top_p[:, None]  # keep the token that crosses top_p
    drop |= sorted_p < sorted_p[:, :1] * min_p[:, None]
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)


def sample(
    logits: torch.Tensor,
    reqs: list[Req],
    eos_ids: set[int],
    bitmask: torch.Tensor | None = None,
) -> SampleOutput:
    """Pick one next token per row of `logits` ([B, V] float32) for the matching request;
    `bitmask` (fill_grammar_bitmask) limits the rows of constrained requests, before
    penalties, temperature, top-k, top-p and min-p."""
    batch, vocab = logits.shape
    params = [r.sampling_params for r in reqs]
    want_logprob = [r.return_logprob for r in reqs]
    raw_logprobs = torch.log_softmax(logits, dim=-1) if any(want_logprob) else None
    if bitmask is not None:
        apply_token_bitmask(logits, bitmask)

    for row, (req, sp) in enumerate(zip(reqs, params)):
        # a grammar decides itself when the text may end
        if len(req.output_ids) < sp.min_new_tokens and req.grammar is None:
            banned = set(sp.stop_token_ids) | (set() if sp.ignore_eos else eos_ids)
            if banned:
                logits[row, list(banned)] = float("-inf")
    for row, sp in enumerate(params):
        if sp.logit_bias:
            ids, biases = zip(*sp.bias_items())
            logits[row, list(ids)] += torch.tensor(biases, dtype=logits.dtype)
    penalty_rows = [i for i, sp in enumerate(params) if sp.has_penalties]
    if penalty_rows:
        apply_penalties(logits, reqs, penalty_rows, vocab)
    logits.masked_fill_(logits.isnan(), float("-inf"))  # extreme penalties or a broken model

    next_ids = logits.argmax(dim=-1)
    random_rows = [i for i, sp in enumerate(params) if not sp.is_greedy]
    if random_rows:
        idx = torch.tensor(random_rows)
        temps = torch.tensor([params[i].temperature for i in random_rows])[:, None]
        probs = torch.softmax(logits[idx] / temps, dim=-1)
        broken = ~torch.isfinite(probs).all(dim=-1)  # an infinite logit: that token is certain
        if bool(broken.any()):
            probs[broken] = torch.nn.functional.one_hot(next_ids[idx][broken], vocab).to(probs)
        top_k = torch.tensor(
            [params[i].top_k if params[i].top_k > 0 else vocab for i in random_rows]
        )
        top_p = torch.tensor([params[i].top_p for i in random_rows])
        min_p = torch.tensor([params[i].min_p for i in random_rows])
        if bool((top_k < vocab).any() or (top_p < 1).any() or (min_p > 0).any()):
            probs = _filter_probs(probs, top_k, top_p, min_p)
        picked = _draw(probs, [reqs[i].generator for i in random_rows])
        next_ids[idx] = picked

    ids = next_ids.tolist()
    logprobs = top = None
    if raw_logprobs is not None:
        logprobs = raw_logprobs.gather(1, next_ids[:, None]).squeeze(1).tolist()
        k = max(r.top_logprobs_num for r in reqs)
        if k > 0:
            values, indices = raw_logprobs.topk(min(k, vocab), dim=-1)
            values, indices = values.tolist(), indices.tolist()
            top = [
                list(zip(values[i][: r.top_logprobs_num], indices[i][: r.top_logprobs_num]))
                for i, r in enumerate(reqs)
            ]
    return SampleOutput(ids, logprobs, top)


def _draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
    """One multinomial draw per row; seeded rows draw from their own generator."""
    out = torch.multinomial(probs, 1).squeeze(1)
    for row, gen in enumerate(generators):
        if gen is not None:
            out[row] = torch.multinomial(probs[row], 1, generator=gen)[0]
    return out


def prompt_logprobs(logits: torch.Tensor, targets: list[int], top_k: int):
    """Log-probabilities of `targets` under each row of logits, plus each row's top-k."""
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp.gather(1, torch.tensor(targets)[:, None]).squeeze(1).tolist()
    top = None
    if top_k > 0:
        v, i = lp.topk(min(top_k, lp.shape[-1]), dim=-1)
        top = [list(zip(a, b)) for a, b in zip(v.tolist(), i.tolist())]
    return chosen, top


def fill_grammar_bitmask(matchers: list, words: int) -> torch.Tensor | None:
    """One int32 row of allowed-token bits per matcher (every bit set where the matcher is
    None); None when no row is constrained. The matchers' kernels release the GIL, so this
    runs in a thread while the model's forward pass runs."""
    if all(m is None for m in matchers):
        return None
    bitmask = torch.full((len(matchers), words), -1, dtype=torch.int32)
    for row, matcher in enumerate(matchers):
        if matcher is not None:
            matcher.fill_next_token_bitmask(bitmask, row)
    return bitmask


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set to -inf, for all rows in one call, the logits whose bit in `bitmask` is 0."""
    if logits.is_cuda:
        from kernels import apply_token_bitmask_inplace

        apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True))
    else:
        from kernels import apply_token_bitmask_inplace_ref

        apply_token_bitmask_inplace_ref(logits, bitmask)
