"""The sampler never produces NaN probabilities or an out-of-range token, whatever the logits
and parameters (infinite logits, NaN rows, extreme penalties, tiny temperatures)."""

import pytest
import torch

from runtime.sampling.params import SamplingParams
from runtime.sampling.sampler import sample
from runtime.scheduler.req import Req

VOCAB = 64


def make_req(rid: str, **params) -> Req:
    req = Req(rid, [1, 2, 3, 5, 8], SamplingParams.from_dict(params))
    req.output_ids = [5, 8, 8]
    return req


def test_nan_and_infinite_logits_still_give_valid_tokens():
    logits = torch.randn(4, VOCAB)
    logits[0, 7] = float("inf")
    logits[1] = float("nan")
    logits[2, :10] = float("nan")
    logits[3, 3] = float("inf")
    logits[3, 9] = float("inf")
    reqs = [make_req(f"r{i}", temperature=1.0, seed=i) for i in range(4)]
    out = sample(logits.clone(), reqs, eos_ids=set())
    assert all(0 <= t < VOCAB for t in out.next_ids)
    assert out.next_ids[0] == 7  # an infinite logit is certain
    assert out.next_ids[3] in (3, 9)
    assert out.next_ids[2] >= 10  # NaN entries are never picked while others exist


def test_extreme_repetition_penalty_and_tiny_temperature():
    torch.manual_seed(0)
    logits = torch.randn(3, VOCAB) * 5
    reqs = [
        make_req("a", temperature=1.0, repetition_penalty=1e-300),
        make_req("b", temperature=1e-40),
        make_req("c", temperature=1.0, repetition_penalty=2.0, frequency_penalty=2.0),
    ]
    out = sample(logits.clone(), reqs, eos_ids=set())
    assert all(0 <= t < VOCAB for t in out.next_ids)
    assert out.next_ids[1] == int(logits[1].argmax())  # below 1e-5 sampling is greedy


def test_top_k_beyond_the_vocabulary_means_no_top_k():
    logits = torch.zeros(1, VOCAB)
    logits[0, :2] = 50.0  # two equally likely tokens, the rest negligible
    picks = set()
    for seed in range(20):
        req = make_req("k", temperature=1.0, top_k=2**31 - 1, seed=seed)
        picks.add(sample(logits.clone(), [req], eos_ids=set()).next_ids[0])
    assert picks == {0, 1}


def test_validation_bounds_name_the_field():
    import pytest

    cases = {
        "seed": 2**64,
        "top_k": 2**63,
        "max_new_tokens": 2**31,
        "stop": ["x" * 1025],
        "stop_token_ids": list(range(1025)),
        "regex": "\ud800",
    }
    for field, value in cases.items():
        with pytest.raises(ValueError, match=f"sampling_params.{field}"):
            SamplingParams.from_dict({field: value})
    SamplingParams.from_dict({"seed": -(2**63), "top_k": 2**31 - 1, "max_new_tokens": 2**31 - 1})
    with pytest.raises(ValueError, match="must be an object"):
        SamplingParams.from_dict(["max_new_tokens", 3])


def test_native_greedy_picks_match_torchs_argmax_with_nan_as_minus_infinity():
    """qgemv.argmax_rows (the CPU's greedy picks, read in place) against torch: ties (the first
    index wins), NaN, -inf and +inf values, all-NaN and all -inf rows, any row subset."""
    from runtime.model import qgemv

    if qgemv.load() is None:
        pytest.skip("no native kernels on this machine")
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        rows, n = int(torch.randint(1, 6, (), generator=gen)), 1 + trial * 7 % 301
        x = torch.randn(rows, n, generator=gen)
        if trial % 3 == 0:
            x = torch.randint(-2, 2, (rows, n), generator=gen).float()  # many ties
        for every, value in ((5, float("nan")), (7, float("-inf")), (11, float("inf"))):
            if trial % every == 0:
                x[torch.rand(rows, n, generator=gen) < 0.3] = value
        if trial % 13 == 0:
            x[0] = float("nan") if trial % 2 else float("-inf")
        picked = torch.randint(0, rows, (rows + 2,), generator=gen).tolist()
        want = x.masked_fill(x.isnan(), float("-inf")).argmax(-1)[picked].tolist()
        assert qgemv.argmax_rows(x, picked) == want, (trial, x)


def test_cpu_batches_nothing_edits_sample_as_the_torch_path_does(monkeypatch):
    """Greedy and seeded rows read in place (no copy, native greedy picks) give the same tokens
    and logprobs as the copied torch path, and leave the forward's logits untouched."""
    from runtime.model import qgemv

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 4000, generator=gen) * 3
    logits[2, 100:200] = float("nan")
    rows = [5, 0, 2, 3]
    params = [dict(temperature=0), dict(temperature=0.8, seed=3, top_p=0.9), dict(temperature=0)]
    params.append(dict(temperature=0))

    def run():
        reqs = [make_req(f"r{i}", **p) for i, p in enumerate(params)]
        reqs[3].return_logprob = True
        before = logits.clone()
        out = sample(logits, reqs, eos_ids=set(), rows=rows)
        assert torch.equal(logits.nan_to_num(-1.0), before.nan_to_num(-1.0))
        return out

    native = run()
    monkeypatch.setattr(qgemv, "argmax_rows", lambda x, rows: None)
    fallback = run()
    assert native.next_ids == fallback.next_ids
    logprobs = torch.tensor(native.logprobs), torch.tensor(fallback.logprobs)
    torch.testing.assert_close(*logprobs, rtol=0, atol=0, equal_nan=True)


class _AllowAll:
    def fill_next_token_bitmask(self, bitmask, row):
        pass


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="no OpenMP team with one thread")
def test_grammar_masks_start_no_openmp_team_in_their_thread():
    """The masks are filled in a thread of their own while the model runs. An OpenMP parallel
    region there (torch.full over 48+ rows did it) gives that thread a team whose workers live
    as long as it does; with more OpenMP threads than cores libgomp stops spinning between
    regions, and the model's CPU kernels ran 2x slower for the rest of the process."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from runtime.sampling.sampler import fill_grammar_bitmask

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    torch.full((64, 1536), -1, dtype=torch.int32)  # this thread's team, if it has none yet
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()
        before = threads()
        bitmask = pool.submit(fill_grammar_bitmask, [_AllowAll()] * 64, 1536).result()
        assert threads() == before
    assert bitmask.shape == (64, 1536) and bool((bitmask == -1).all())
