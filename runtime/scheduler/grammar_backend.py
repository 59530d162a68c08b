"""Constrained decoding: sampling_params json_schema / regex / ebnf / structural_tag compiled
with the grammars package, one matcher per request (the sampler applies their masks to the
logits)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import orjson

from runtime.sampling.params import CONSTRAINT_FIELDS, SamplingParams
from runtime.scheduler.compile_worker import CompileTimeout, CompileWorker

MAX_CONSTRAINT_BYTES = 4 << 20  # the text of one schema, regex or grammar
JSON_WHITESPACE_RUN = 8  # --json-whitespace bounded: characters in one run between JSON tokens
_JSON_KINDS = ("json_schema", "structural_tag")


def json_options(mode: str, number_digits: int = 0) -> dict:
    """compile_json_schema / compile_structural_tag options of a --json-whitespace mode and a
    --json-number-digits bound (0: none)."""
    return {
        "any_whitespace": mode != "compact",
        "max_whitespace_cnt": JSON_WHITESPACE_RUN if mode == "bounded" else None,
        "max_number_digits": number_digits or None,
    }


class GrammarBackend:
    """Compiles constraints in a child process (CompileWorker) and keeps the last
    CACHE_SIZE compiled grammars, keyed by the constraint's text."""

    CACHE_SIZE = 64

    def __init__(
        self,
        tokenizer,
        vocab_size: int | None = None,
        json_whitespace: str = "bounded",
        json_number_digits: int = 0,
    ):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.json_options = json_options(json_whitespace, json_number_digits)
        self._compiler = None
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.worker = CompileWorker()

    @property
    def compiler(self):
        """The GrammarCompiler, built on first use: it holds the token vocabulary."""
        if self._compiler is None:
            from grammars import GrammarCompiler

            self._compiler = GrammarCompiler(self.tokenizer, vocab_size=self.vocab_size)
        return self._compiler

    @staticmethod
    def key(sp: SamplingParams) -> tuple[str, str] | None:
        """(field, text) of the constraint of `sp`; None without one."""
        field = next((f for f in CONSTRAINT_FIELDS if getattr(sp, f) is not None), None)
        if field is None:
            return None
        value = getattr(sp, field)
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if len(text) > MAX_CONSTRAINT_BYTES:  # characters: a cheap lower bound on the bytes
            raise ValueError(f"sampling_params.{field}: longer than {MAX_CONSTRAINT_BYTES} bytes")
        return field, text

    def cached(self, key: tuple[str, str]):
        """The compiled grammar of the constraint `key` (GrammarBackend.key) if the cache holds
        it, else None: a constraint compiled before (an agent's tools, turn after turn) need not
        queue behind other compiles."""
        with self._cache_lock:
            grammar = self._cache.get(key)
            if grammar is not None:
                self._cache.move_to_end(key)
        return grammar

    def compile(
        self,
        sp: SamplingParams,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        key: tuple[str, str] | None = None,
    ):
        """The compiled grammar of `sp`, or None. ValueError naming the field if the constraint
        is bad or its compilation takes longer than `timeout` seconds; `cancel` stops it
        (CompileCancelled). `key`: GrammarBackend.key(sp), when the caller has it."""
        from grammars import CompiledGrammar, GrammarError

        key = key or self.key(sp)
        if key is None:
            return None
        grammar = self.cached(key)
        if grammar is not None:
            return grammar
        field, text = key
        if timeout is not None and timeout <= 0:  # its time went by in the queue
            raise ValueError(
                f"sampling_params.{field}: not compiled: the compiles queued before it took "
                "the whole --grammar-compile-timeout since the request arrived; try again"
            )
        try:
            options = self.json_options if field in _JSON_KINDS else {}
            machine = self.worker.build(field, text, timeout, cancel, options)
        except CompileTimeout as exc:
            raise ValueError(
                f"sampling_params.{field}: {exc} (--grammar-compile-timeout)"
            ) from None
        except GrammarError as exc:
            raise ValueError(f"sampling_params.{field}: {exc}") from None
        grammar = CompiledGrammar(machine, self.compiler.vocab, field)
        with self._cache_lock:
            self._cache[key] = grammar
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        return grammar
