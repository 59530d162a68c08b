"""GrammarCompiler: constraints in, shared compiled grammars out (cached by key)."""

from __future__ import annotations

import gc
import json
import threading
from collections import OrderedDict

from grammars.automaton import alt, lit
from grammars.errors import GrammarError
from grammars.grammar import CompiledGrammar, Machine
from grammars.regex import regex_to_node
from grammars.tokenizer_info import TokenizerInfo
from grammars.vocabulary import Vocabulary


class GrammarCompiler:
    """Builds the vocabulary of a Hugging Face tokenizer once; compiles constraints against it."""

    def __init__(self, tokenizer, vocab_size: int | None = None, cache_size: int = 64):
        info = (
            tokenizer
            if isinstance(tokenizer, TokenizerInfo)
            else (TokenizerInfo.from_huggingface(tokenizer, vocab_size))
        )
        self.vocab = Vocabulary(info, vocab_size)
        self._cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    def _cached(self, key: tuple, build) -> CompiledGrammar:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        collecting = gc.isenabled()
        gc.disable()  # compilation allocates many small lists; cyclic GC passes dominate
        try:
            rules, root = build()
            grammar = CompiledGrammar(Machine(rules, root), self.vocab, key[0])
        except RecursionError:
            raise GrammarError("constraint nested too deeply") from None
        finally:
            if collecting:
                gc.enable()
        with self._lock:
            self._cache[key] = grammar
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return grammar

    def compile_regex(self, pattern: str) -> CompiledGrammar:
        """The whole output must match `pattern` (Python `re` syntax)."""
        return self._cached(("regex", pattern), lambda: ({"root": regex_to_node(pattern)}, "root"))

    def compile_choices(self, choices: list[str]) -> CompiledGrammar:
        if not choices or not all(isinstance(c, str) for c in choices):
            raise GrammarError("choices must be a non-empty list of strings")
        return self._cached(
            ("choices", tuple(choices)), lambda: ({"root": alt(*(lit(c) for c in choices))}, "root")
        )

    def compile_json_schema(
        self,
        schema,
        *,
        any_whitespace: bool = True,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = False,
    ) -> CompiledGrammar:
        """`schema` as a dict or JSON text. any_whitespace=False writes exactly `separators`
        (default ", " and ": "); strict_mode=True forbids properties and items the schema does
        not name (as if additionalProperties / items were false)."""
        from grammars.json_schema import schema_to_rules

        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise GrammarError(f"schema is not valid JSON: {exc}") from None
        key = (
            "json_schema",
            json.dumps(schema, sort_keys=True),
            any_whitespace,
            tuple(separators) if separators else None,
            strict_mode,
        )
        return self._cached(
            key,
            lambda: schema_to_rules(
                schema, any_whitespace=any_whitespace, separators=separators, strict=strict_mode
            ),
        )

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value."""
        return self.compile_json_schema({})

    def compile_ebnf(self, grammar: str, start: str = "start") -> CompiledGrammar:
        """A grammar in lark's EBNF syntax, matched at the character level."""
        from grammars.ebnf import lark_to_rules

        return self._cached(("ebnf", grammar, start), lambda: lark_to_rules(grammar, start))


def warm_up() -> None:
    """Compile the mask kernels now, with a small made-up vocabulary (numba keeps them on disk,
    so this costs seconds once per install and a fraction of a second after); a server calls it
    at start so the first constrained request does not wait for it."""
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b'", "', "é日".encode(), b"\\u00e9"]
    info = TokenizerInfo(tuple(tokens), frozenset(), frozenset({len(tokens) - 1}), "byte_level")
    compiler = GrammarCompiler(info)
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 4}, "b": {}},
        "required": ["a"],
    }
    matcher = compiler.compile_json_schema(schema).matcher()
    for byte in b'{"a": "ab", "b": [1]}':  # single-byte tokens have their byte as id
        matcher.next_token_mask()
        matcher.accept_token(byte)
