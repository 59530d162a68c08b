"""Constrained decoding: sampling_params json_schema / regex / ebnf compiled with the grammars
package, one matcher per request (the sampler applies their masks to the logits)."""

from __future__ import annotations

import json

from runtime.sampling.params import CONSTRAINT_FIELDS, SamplingParams


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
