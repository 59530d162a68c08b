"""How `select` picks a choice from the prompt logprobs of each `prefix + choice` (SGLang's
three methods). Each method sees, per choice, the logprob entries `[logprob, token_id, text]`
of the choice's own tokens; `decide` is how a backend that has them asks a method."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

TokenLogprobs = list[list[Any]]  # one [logprob, token_id, text] entry per token


@dataclass
class ChoicesDecision:
    """The chosen string and what the method based it on."""

    decision: str
    meta_info: dict[str, Any] = field(default_factory=dict)


def _argmax(values: list[float]) -> int:
    """Index of the largest value, the first one on ties."""
    return max(range(len(values)), key=values.__getitem__)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("-inf")


def mean_logprob(tokens: TokenLogprobs) -> float:
    """Mean of the entries' logprobs, skipping the None a first prompt token has."""
    return _mean([entry[0] for entry in tokens if entry[0] is not None])


def choice_token_logprobs(tokens: TokenLogprobs, prefix: str) -> TokenLogprobs:
    """A choice's own entries, from the entries of `prefix + choice` that start at the
    prefix's last token: that token is dropped unless the choice merged into it when
    tokenized (token healing)."""
    first = tokens[0]
    if len(tokens) > 1 and (first[0] is None or prefix.endswith(first[2] or "\0")):
        return tokens[1:]
    return tokens


def decide(
    method: ChoicesSamplingMethod,
    choices: list[str],
    input_token_logprobs: list[TokenLogprobs],
    unconditional_token_logprobs: list[TokenLogprobs] | None = None,
    output_token_logprobs: list[TokenLogprobs] | None = None,
) -> ChoicesDecision:
    """Ask `method` to pick among `choices` given each choice's own token entries (and, for
    a method that `requires_unconditional_logprobs`, the same tokens scored without context)."""
    return method(
        choices=choices,
        normalized_prompt_logprobs=[mean_logprob(tokens) for tokens in input_token_logprobs],
        input_token_logprobs=input_token_logprobs,
        output_token_logprobs=output_token_logprobs or [[] for _ in choices],
        unconditional_token_logprobs=unconditional_token_logprobs,
    )


class ChoicesSamplingMethod(ABC):
    """Decides among choices given their token logprobs."""

    name = "choices method"  # the name `lang` exports the instance under
    requires_unconditional_logprobs = False

    @abstractmethod
    def __call__(
        self,
        *,
        choices: list[str],
        normalized_prompt_logprobs: list[float],
        input_token_logprobs: list[TokenLogprobs],
        output_token_logprobs: list[TokenLogprobs],
        unconditional_token_logprobs: list[TokenLogprobs] | None = None,
    ) -> ChoicesDecision: ...

    def __repr__(self) -> str:
        return self.name


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The choice with the highest mean token logprob."""

    name = "token_length_normalized"

    def __call__(self, *, choices, normalized_prompt_logprobs, **logprobs) -> ChoicesDecision:
        meta = {"normalized_prompt_logprobs": normalized_prompt_logprobs, **logprobs}
        return ChoicesDecision(choices[_argmax(normalized_prompt_logprobs)], meta)


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Compares choices token by token, keeping those with the best logprob at each position;
    a choice shorter than the others is padded with its own mean logprob."""

    name = "greedy_token_selection"

    def __call__(self, *, choices, normalized_prompt_logprobs, **logprobs) -> ChoicesDecision:
        rows = [[entry[0] for entry in tokens] for tokens in logprobs["input_token_logprobs"]]
        width = max(len(row) for row in rows)
        matrix = [row + [_mean(row)] * (width - len(row)) for row in rows]
        remaining = list(range(len(choices)))
        for column in range(width):
            best = max(matrix[i][column] for i in remaining)
            remaining = [i for i in remaining if matrix[i][column] == best]
            if len(remaining) == 1:
                break
        meta = {
            "normalized_prompt_logprobs": normalized_prompt_logprobs,
            "greedy_logprob_matrix": matrix,
            **logprobs,
        }
        return ChoicesDecision(choices[remaining[0]], meta)


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The choice whose tokens gain the most, on average, from the context: the mean of
    (logprob in context - logprob of the same tokens without any context)."""

    name = "unconditional_likelihood_normalized"

    requires_unconditional_logprobs = True

    def __call__(self, *, choices, normalized_prompt_logprobs, **logprobs) -> ChoicesDecision:
        unconditional = logprobs.get("unconditional_token_logprobs")
        if unconditional is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional logprobs")
        scores = []
        for tokens, alone in zip(logprobs["input_token_logprobs"], unconditional):
            if len(tokens) != len(alone):
                raise ValueError("conditional and unconditional logprobs differ in length")
            # The first token has no logprob without context: it counts as certain (0).
            base = [entry[0] or 0.0 for entry in alone]
            scores.append(_mean([entry[0] - b for entry, b in zip(tokens, base)]))
        meta = {
            "normalized_prompt_logprobs": normalized_prompt_logprobs,
            "normalized_unconditional_prompt_logprobs": scores,
            **logprobs,
        }
        return ChoicesDecision(choices[_argmax(scores)], meta)


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()
