"""The three choice methods on a constructed case where each picks a different choice."""

import pytest

import lang as sgl

CHOICES = ["A", "B", "C"]
# per choice, its tokens' [logprob, token_id, text] in context ...
CONDITIONAL = [
    [[-0.5, 1, "a"], [-3.0, 2, "b"]],  # best first token
    [[-1.0, 3, "c"], [-1.0, 4, "d"]],  # best mean
    [[-2.0, 5, "e"], [-2.0, 6, "f"]],  # likely only in context
]
# ... and without any context (the first token has no logprob there)
UNCONDITIONAL = [
    [[None, 1, "a"], [-0.5, 2, "b"]],
    [[None, 3, "c"], [-0.2, 4, "d"]],
    [[None, 5, "e"], [-5.0, 6, "f"]],
]


def decide(method):
    normalized = [sum(t[0] for t in tokens) / len(tokens) for tokens in CONDITIONAL]
    return method(
        choices=CHOICES,
        normalized_prompt_logprobs=normalized,
        input_token_logprobs=CONDITIONAL,
        output_token_logprobs=[[] for _ in CHOICES],
        unconditional_token_logprobs=UNCONDITIONAL,
    )


def test_each_method_picks_a_different_choice():
    assert decide(sgl.token_length_normalized).decision == "B"
    assert decide(sgl.greedy_token_selection).decision == "A"
    assert decide(sgl.unconditional_likelihood_normalized).decision == "C"


def test_unconditional_scores_are_mean_gains_over_no_context():
    meta = decide(sgl.unconditional_likelihood_normalized).meta_info
    assert meta["normalized_unconditional_prompt_logprobs"] == pytest.approx([-1.5, -0.9, 0.5])
    assert sgl.unconditional_likelihood_normalized.requires_unconditional_logprobs
    assert not sgl.token_length_normalized.requires_unconditional_logprobs


def test_greedy_pads_a_shorter_choice_with_its_mean():
    # "x" = one token at -1; "xy" = -1 then -2: "x" is padded with -1 and wins position 2
    short, long = [[-1.0, 1, "x"]], [[-1.0, 1, "x"], [-2.0, 2, "y"]]
    decision = sgl.greedy_token_selection(
        choices=["x", "xy"],
        normalized_prompt_logprobs=[-1.0, -1.5],
        input_token_logprobs=[short, long],
        output_token_logprobs=[[], []],
    )
    assert decision.decision == "x"
    assert decision.meta_info["greedy_logprob_matrix"] == [[-1.0, -1.0], [-1.0, -2.0]]


def test_ties_go_to_the_first_choice():
    same = [[[-1.0, 1, "t"]], [[-1.0, 2, "u"]]]
    decision = sgl.token_length_normalized(
        choices=["first", "second"],
        normalized_prompt_logprobs=[-1.0, -1.0],
        input_token_logprobs=same,
        output_token_logprobs=[[], []],
    )
    assert decision.decision == "first"
