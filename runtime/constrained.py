"""Constrained decoding: sampling_params json_schema / regex / ebnf compiled with the grammars
package, one matcher per request, masks applied to the logits before sampling."""

from __future__ import annotations

import json

import numpy as np
import torch

from runtime.sampling_params import CONSTRAINT_FIELDS, SamplingParams


class GrammarBackend:
    """Compiles constraints once per process (compiled grammars are cached by the compiler)."""

    def __init__(self, tokenizer, vocab_size: int | None = None):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._compiler = None

    @property
    def compiler(self):
        if self._compiler is None:
            from grammars import GrammarCompiler

            self._compiler = GrammarCompiler(self.tokenizer, vocab_size=self.vocab_size)
        return self._compiler

    def compile(self, sp: SamplingParams):
        """The compiled grammar of `sp`, or None; ValueError naming the field if it is bad."""
        from grammars import GrammarError

        field = next((f for f in CONSTRAINT_FIELDS if getattr(sp, f) is not None), None)
        if field is None:
            return None
        value = getattr(sp, field)
        try:
            if field == "json_schema":
                schema = json.loads(value) if isinstance(value, str) else value
                return self.compiler.compile_json_schema(schema)
            if field == "regex":
                return self.compiler.compile_regex(value)
            return self.compiler.compile_ebnf(value)
        except (GrammarError, json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"sampling_params.{field}: {exc}") from None


def apply_grammar_masks(logits: torch.Tensor, matchers: list) -> None:
    """Set to -inf, row by row, the logits of tokens each row's matcher forbids (None = free)."""
    for row, matcher in enumerate(matchers):
        if matcher is None:
            continue
        allowed = torch.from_numpy(np.ascontiguousarray(matcher.next_token_mask()))
        width = min(len(allowed), logits.shape[-1])
        logits[row, :width].masked_fill_(~allowed[:width], float("-inf"))
        if logits.shape[-1] > width:
            logits[row, width:] = float("-inf")
