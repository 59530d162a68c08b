"""The sampler never produces NaN probabilities or an out-of-range token, whatever the logits
and parameters (infinite logits, NaN rows, extreme penalties, tiny temperatures)."""

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
