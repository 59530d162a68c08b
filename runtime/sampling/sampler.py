"""Batched sampling: penalties, temperature, top-k, top-p, min-p, seeds and logprobs.

Requests with different parameters share one call; each step runs a handful of tensor ops over
the whole batch on the logits' device, and the sort that top-k/top-p/min-p need only for the
rows that use them. The per-request parameters travel to the device in one copy
(runtime.transfer); the chosen ids and the requested logprobs are all that come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from runtime.model import qgemv
from runtime.scheduler.req import Req
from runtime.transfer import to_device


@dataclass
class SampleOutput:
    next_ids: list[int]
    logprobs: list[float] | None  # of the chosen tokens under the model's distribution
    top_logprobs: list[list[tuple[float, int]]] | None

    def row(self, i: int) -> tuple:
        """(token, logprob or None, top logprobs or None) of request i."""
        return (
            self.next_ids[i],
            None if self.logprobs is None else self.logprobs[i],
            None if self.top_logprobs is None else self.top_logprobs[i],
        )


_Column = list | torch.Tensor


class _BatchParams(NamedTuple):
    """What sampling a batch needs besides the logits, as flat lists built on the host, then
    (the same fields) as tensors on the logits' device, moved in one copy."""

    rows: _Column  # the row of the logits each request samples from
    ban_rows: _Column  # (row, token) pairs set to -inf: stop and EOS ids before min_new_tokens
    ban_ids: _Column
    bias_rows: _Column  # (row, token) pairs that get a logit_bias
    bias_ids: _Column
    penalty_rows: _Column  # rows with penalties, then their output and all ids, row after row
    out_lens: _Column
    out_ids: _Column
    all_lens: _Column
    all_ids: _Column
    random_rows: _Column  # rows that sample (not greedy), then their parameters
    top_k: _Column
    biases: _Column  # the floats, from here on
    frequency: _Column
    presence: _Column
    repetition: _Column
    temperature: _Column
    top_p: _Column
    min_p: _Column

    def to(self, device: torch.device) -> _BatchParams:
        """The same fields as tensors on `device`: int64 up to `biases`, float32 from there."""
        cut = self._fields.index("biases")
        return _BatchParams(*to_device(device, self[:cut], self[cut:]))


def _batch_params(
    reqs: list[Req],
    rows: list[int],
    eos_ids: set[int],
    penalty_rows: list[int],
    vocab: int,
    made: list[int] | None = None,
) -> _BatchParams:
    """The host lists of a batch: request i samples from logits row rows[i], having made
    made[i] output tokens (default: its output_ids); the rows in `penalty_rows` (indices
    into reqs) get penalties."""
    p = _BatchParams(rows, *([] for _ in range(len(_BatchParams._fields) - 1)))
    for row, req in enumerate(reqs):
        sp = req.sampling_params
        n_out = len(req.output_ids) if made is None else made[row]
        # a grammar decides itself when the text may end
        if n_out < sp.min_new_tokens and req.grammar is None:
            banned = set(sp.stop_token_ids) | (set() if sp.ignore_eos else eos_ids)
            p.ban_rows.extend([row] * len(banned))
            p.ban_ids.extend(banned)
        if sp.logit_bias:
            items = dict(sp.bias_items())  # one bias per token: the last given
            p.bias_rows.extend([row] * len(items))
            p.bias_ids.extend(items)
            p.biases.extend(items.values())
        if not sp.is_greedy:
            p.random_rows.append(row)
            p.top_k.append(sp.top_k if sp.top_k > 0 else vocab)
            p.temperature.append(sp.temperature)
            p.top_p.append(sp.top_p)
            p.min_p.append(sp.min_p)
    for row in penalty_rows:
        req, sp = reqs[row], reqs[row].sampling_params
        p.penalty_rows.append(row)
        p.out_lens.append(len(req.output_ids))
        p.out_ids.extend(req.output_ids)
        p.all_lens.append(req.seq_len)
        p.all_ids.extend(req.all_ids)
        p.frequency.append(sp.frequency_penalty)
        p.presence.append(sp.presence_penalty)
        p.repetition.append(sp.repetition_penalty)
    return p


def apply_penalties(logits: torch.Tensor, reqs: list[Req], rows: list[int], vocab: int) -> None:
    """OpenAI frequency/presence penalties on generated tokens; repetition penalty on all tokens."""
    params = _batch_params(reqs, list(range(len(reqs))), set(), rows, vocab)
    _penalise(logits, params.to(logits.device), vocab)


def _penalise(logits: torch.Tensor, p: _BatchParams, vocab: int) -> None:
    counts = _token_counts(p.out_lens, p.out_ids, vocab)
    seen = _token_counts(p.all_lens, p.all_ids, vocab) > 0
    sub = logits[p.penalty_rows]
    sub = sub - p.frequency[:, None] * counts - p.presence[:, None] * (counts > 0)
    rep = p.repetition[:, None]
    penalised = torch.where(sub > 0, sub / rep, sub * rep)
    logits[p.penalty_rows] = torch.where(seen, penalised, sub)


def _token_counts(lengths: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, vocab] float32: how often each token occurs in each row's ids, where `ids` holds
    the rows' ids one after another (`lengths[r]` for row r)."""
    rows = lengths.numel()
    row_of = torch.repeat_interleave(
        torch.arange(rows, device=ids.device), lengths, output_size=ids.numel()
    )
    counts = torch.zeros(rows, vocab, device=ids.device)
    return counts.index_put_((row_of, ids), torch.ones(ids.numel(), device=ids.device), True)


def _filter_probs(
    probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor
):
    """Zero the probabilities outside each row's top-k, top-p nucleus and min-p floor."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device)[None, :]
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
    rows: list[int] | None = None,
    made: list[int] | None = None,
    defer: bool = False,
) -> SampleOutput | Picks:
    """Pick one next token per request from its row of `logits` ([N, V] float32): row
    `rows[i]` for request i, by default row i. `bitmask` (fill_grammar_bitmask, on the host)
    limits the rows of constrained requests, before penalties, temperature, top-k, top-p and
    min-p. `made` counts each request's output tokens where a step still in flight will add
    to its output_ids (penalties read the output_ids themselves). Everything runs on the
    logits' device; only the chosen ids and the logprobs asked for come back. With `defer`,
    the Picks are returned without waiting for the device."""
    vocab = logits.shape[1]
    params = [r.sampling_params for r in reqs]
    penalty_rows = [i for i, sp in enumerate(params) if sp.has_penalties]
    rows = list(range(len(reqs))) if rows is None else rows
    host = _batch_params(reqs, rows, eos_ids, penalty_rows, vocab, made)
    want_logprob = any(r.return_logprob for r in reqs)
    on_cpu = logits.device.type == "cpu"
    edited = bitmask is not None or bool(host.ban_rows or host.bias_rows or penalty_rows)
    # request i samples from row i (a decode batch): unedited greedy rows need no parameters
    # on the device, hence no copy to it
    in_order = rows == list(range(logits.shape[0]))
    p = None if in_order and not edited and not host.random_rows else host.to(logits.device)
    # Rows that are edited are copied first (a retry after a failure reads the forward's
    # logits again). On the CPU, unedited rows are read where the forward put them (their
    # greedy picks in one native pass); elsewhere request i's row is brought to row i.
    copied = edited or not (on_cpu or in_order)
    if copied:
        logits, in_order = logits[p.rows], True  # a copy, edited in place from here on
    raw_logprobs = None
    if want_logprob:
        raw_logprobs = torch.log_softmax(logits if in_order else logits[p.rows], dim=-1)
    if bitmask is not None:
        apply_token_bitmask(logits, bitmask)
    if host.ban_rows:
        logits[p.ban_rows, p.ban_ids] = float("-inf")
    if host.bias_rows:
        logits[p.bias_rows, p.bias_ids] += p.biases
    if penalty_rows:
        _penalise(logits, p, vocab)

    # NaN (extreme penalties or a broken model) counts as -inf
    native = (
        qgemv.argmax_rows(logits, list(range(len(reqs))) if in_order else rows) if on_cpu else None
    )
    if native is not None:
        next_ids = torch.tensor(native)
    else:
        if not in_order:
            logits, in_order = logits[p.rows], True
        logits = _nan_as_neg_inf(logits)
        next_ids = logits.argmax(dim=-1)
    if host.random_rows:
        idx = p.random_rows
        chosen = logits[idx] if in_order else logits[p.rows[idx]]
        if native is not None:  # the native picks left NaN in place
            chosen = _nan_as_neg_inf(chosen)
        probs = torch.softmax(chosen / p.temperature[:, None], dim=-1)
        _certain_where_broken(probs, next_ids[idx])
        rand = [params[i] for i in host.random_rows]
        if any(0 < sp.top_k < vocab or sp.top_p < 1 or sp.min_p > 0 for sp in rand):
            probs = _filter_probs(probs, p.top_k, p.top_p, p.min_p)
        next_ids[idx] = _draw(probs, [reqs[i] for i in host.random_rows])

    chosen_lp = top_v = top_i = None
    k = 0
    if raw_logprobs is not None:
        chosen_lp = raw_logprobs.gather(1, next_ids[:, None]).squeeze(1)
        k = max(r.top_logprobs_num for r in reqs)
        if k > 0:
            top_v, top_i = raw_logprobs.topk(min(k, vocab), dim=-1)
    picks = Picks(next_ids, chosen_lp, top_v, top_i, [r.top_logprobs_num for r in reqs], defer)
    return picks if defer else picks.output()


class Picks:
    """What one sample() call chose, still on the logits' device: `next_ids` can feed a later
    step there without waiting, while their copy to the host (started at once, into pinned
    memory, on CUDA) is read by `output()`, which waits for it the first time."""

    def __init__(self, next_ids, logprobs, top_values, top_indices, top_nums, copy_now: bool):
        self.next_ids = next_ids
        self._parts = [next_ids, logprobs, top_values, top_indices]
        self._top_nums = top_nums
        self._event = None
        self._output: SampleOutput | None = None
        if copy_now and next_ids.is_cuda:
            self._parts = [None if t is None else _host_copy(t) for t in self._parts]
            self._event = torch.cuda.Event()
            self._event.record()

    def output(self) -> SampleOutput:
        if self._output is None:
            if self._event is not None:
                self._event.synchronize()
            ids, logprobs, values, indices = (
                None if t is None else t.tolist() for t in self._parts
            )
            top = None
            if values is not None:
                top = [list(zip(v[:n], i[:n])) for v, i, n in zip(values, indices, self._top_nums)]
            self._output = SampleOutput(ids, logprobs, top)
            self._parts = []
        return self._output


class PickedRow:
    """Row `index` of a deferred sample() call's Picks: `result()` waits for the host copy."""

    __slots__ = ("picks", "index")

    def __init__(self, picks: Picks, index: int):
        self.picks, self.index = picks, index

    def result(self) -> tuple:
        return self.picks.output().row(self.index)


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of device tensor `t` into pinned host memory, under way when this returns."""
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return out.copy_(t, non_blocking=True)


def _nan_as_neg_inf(x: torch.Tensor) -> torch.Tensor:
    """x with NaN as -inf, in one op (not in place: the forward's logits are inference
    tensors)."""
    inf = float("inf")
    return torch.nan_to_num(x, nan=-inf, posinf=inf, neginf=-inf)


def _certain_where_broken(probs: torch.Tensor, argmax: torch.Tensor) -> None:
    """A row with an infinite logit has no finite softmax: make its argmax certain (in place,
    without asking the device which rows those are)."""
    broken = ~torch.isfinite(probs).all(dim=-1, keepdim=True)
    at = argmax[:, None]
    kept = probs.gather(1, at)
    probs.masked_fill_(broken, 0.0)
    probs.scatter_(1, at, torch.where(broken, 1.0, kept))


def _draw(probs: torch.Tensor, reqs: list[Req]) -> torch.Tensor:
    """One multinomial draw per row; seeded rows draw from their own generator, which lives on
    the probabilities' device."""
    out = torch.multinomial(probs, 1).squeeze(1)
    for row, req in enumerate(reqs):
        gen = req.generator_on(probs.device)
        if gen is not None:
            out[row] = torch.multinomial(probs[row], 1, generator=gen)[0]
    return out


def prompt_logprobs(logits: torch.Tensor, targets: torch.Tensor, top_k: int):
    """Log-probabilities of `targets` (a tensor on the logits' device) under each row of
    logits, plus each row's top-k."""
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp.gather(1, targets[:, None]).squeeze(1).tolist()
    top = None
    if top_k > 0:
        v, i = lp.topk(min(top_k, lp.shape[-1]), dim=-1)
        top = [list(zip(a, b)) for a, b in zip(v.tolist(), i.tolist())]
    return chosen, top


def fill_grammar_bitmask(matchers: list, words: int, pinned: bool = False) -> torch.Tensor | None:
    """One int32 row of allowed-token bits per matcher (every bit set where the matcher is
    None), on the host (in page-locked memory with `pinned`, for an asynchronous copy to a
    GPU); None when no row is constrained. The matchers' kernels release the GIL, so this
    runs in a thread while the model's forward pass runs."""
    if all(m is None for m in matchers):
        return None
    # filled by numpy: torch.full on 32k+ words would start an OpenMP team for this thread,
    # whose workers never leave; with more OpenMP threads than cores, libgomp stops spinning
    # between parallel regions and the model's CPU kernels ran 2x slower from then on
    bitmask = torch.empty((len(matchers), words), dtype=torch.int32, pin_memory=pinned)
    bitmask.numpy().fill(-1)
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

        apply_token_bitmask_inplace_ref(logits, bitmask.to(logits.device))
