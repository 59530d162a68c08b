"""GrammarCompiler: constraints in, shared compiled grammars out (cached by key).

Every compile takes an optional CompileBudget: the size of the constraint's text is checked
before any work, then the deadline and cancel event, at once and while it runs
(grammars.budget); a compile that stops leaves nothing in the cache, and the compiler serves
other compiles as before.
"""

from __future__ import annotations

import gc
import json
import threading
from collections import OrderedDict

import numpy as np
import orjson

from grammars import boxes, lazydfa_arrays, pda, unique_items
from grammars.automaton import alt, lit
from grammars.budget import CompileBudget, checkpoint, running
from grammars.errors import GrammarError
from grammars.grammar import CompiledGrammar, Machine
from grammars.lazydfa import intern_starts
from grammars.literal_set import minimal_dfa
from grammars.regex import regex_to_node
from grammars.tokenizer_info import TokenizerInfo
from grammars.vocabulary import Vocabulary

MAX_SCHEMA_DEPTH = 256  # objects and arrays nested in a schema's JSON
_MIN_CHOICE_SET = 32  # more choices become one minimal DFA rather than an alternation


class GrammarCompiler:
    """Builds the vocabulary of a Hugging Face tokenizer once; compiles constraints against it,
    keeping the last `cache_size` grammars compiled (0: none, each compile builds anew)."""

    def __init__(self, tokenizer, vocab_size: int | None = None, cache_size: int = 64):
        info = (
            tokenizer
            if isinstance(tokenizer, TokenizerInfo)
            else (TokenizerInfo.from_huggingface(tokenizer, vocab_size))
        )
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 0:
            raise ValueError(f"cache_size must be an integer >= 0, not {cache_size!r}")
        self.vocab = Vocabulary(info, vocab_size)
        self._cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    def _cached(self, key: tuple, build) -> CompiledGrammar:
        """The grammar of `key`, built by `build()` (rules, root) unless cached; call it under
        running(budget): a build that stops on the budget caches nothing."""
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        grammar = CompiledGrammar(_machine(build), self.vocab, key[0])
        if not self._cache_size:
            return grammar
        with self._lock:
            self._cache[key] = grammar
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return grammar

    # Each compile checks the size of the constraint first, then the budget (even when the
    # grammar is cached: a cancelled request gets no grammar), then often while it works.
    def compile_regex(
        self, pattern: str, *, budget: CompileBudget | None = None
    ) -> CompiledGrammar:
        """The whole output must match `pattern` (Python `re` syntax)."""
        _check_size(budget, pattern)
        with running(budget):
            checkpoint()
            return self._cached(
                ("regex", pattern), lambda: ({"root": regex_to_node(pattern)}, "root")
            )

    def compile_choices(
        self, choices: list[str], *, budget: CompileBudget | None = None
    ) -> CompiledGrammar:
        """The whole output must be one of `choices`."""
        if not choices or not all(isinstance(c, str) for c in choices):
            raise GrammarError("choices must be a non-empty list of strings")
        if budget is not None:
            budget.check_size(sum(len(c.encode("utf-8", "surrogatepass")) for c in choices))
        with running(budget):
            checkpoint()
            return self._cached(("choices", tuple(choices)), lambda: _choices_rules(choices))

    def compile_json_schema(
        self,
        schema,
        *,
        any_whitespace: bool = True,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = False,
        max_whitespace_cnt: int | None = None,
        max_number_digits: int | None = None,
        property_order: str = "schema",
        budget: CompileBudget | None = None,
    ) -> CompiledGrammar:
        """`schema` as a dict or JSON text. any_whitespace=False writes exactly `separators`
        (default ", " and ": "); otherwise each whitespace run holds at most
        `max_whitespace_cnt` characters (None: unbounded). strict_mode=True forbids properties
        and items the schema does not name (as if additionalProperties / items were false).
        `max_number_digits` bounds each digit run (integer part, fraction, exponent) of numbers
        whose schema leaves them unbounded (None: unbounded, exactly the schema).
        property_order="any" accepts an object's properties in any order ("schema", the
        default: in the order of `properties`, a smaller automaton)."""
        from grammars.json_schema import check_depth, check_text_depth, schema_to_rules

        if isinstance(schema, str):
            _check_size(budget, schema)
        with running(budget):
            checkpoint()
            if isinstance(schema, str):
                check_text_depth(schema, MAX_SCHEMA_DEPTH)  # before json.loads recurses
                try:
                    schema = json.loads(schema, parse_constant=_not_json)
                except ValueError as exc:  # not JSON, or a number too long to read
                    raise GrammarError(f"schema is not valid JSON: {exc}") from None
            # before schema_text and the builder recurse
            plain = check_depth(schema, MAX_SCHEMA_DEPTH, budget.max_bytes if budget else None)
            text = schema_text(schema, plain)
            _check_size(budget, text)
            checkpoint()
            key = (
                "json_schema",
                text,
                any_whitespace,
                tuple(separators) if separators else None,
                strict_mode,
                max_whitespace_cnt,
                max_number_digits,
                property_order,
            )
            # what the matcher checks beside the automaton (uniqueItems over free strings)
            checks: list | None = [] if '"uniqueItems":true' in text else None

            def build():
                rules, root = schema_to_rules(
                    schema,
                    any_whitespace=any_whitespace,
                    separators=separators,
                    strict=strict_mode,
                    max_whitespace_cnt=max_whitespace_cnt,
                    max_number_digits=max_number_digits,
                    property_order=property_order,
                    checks=checks,
                    text=text,
                )
                return rules, root, *(checks or ())

            return self._cached(key, build)

    def compile_structural_tag(
        self,
        tag,
        *,
        any_whitespace: bool = True,
        max_whitespace_cnt: int | None = None,
        max_number_digits: int | None = None,
        budget: CompileBudget | None = None,
    ) -> CompiledGrammar:
        """Free text in which each trigger opens one of the tag's structures (begin, a JSON
        document valid against its schema, end); `tag` as a dict or JSON text
        (grammars.structural_tag); JSON options as compile_json_schema takes them."""
        from grammars.json_schema import schema_to_rules
        from grammars.structural_tag import parse_structural_tag, structural_tag_rules

        text = tag if isinstance(tag, str) else json.dumps(tag)  # keys in order, as above
        _check_size(budget, text)
        with running(budget):
            checkpoint()
            structures, triggers = parse_structural_tag(tag)  # errors before the cache
            # uniqueItems over free strings left to the matcher, where it can find each JSON
            track = "uniqueItems" in text and unique_items.tagged_plan_possible(
                structures, triggers
            )

            def build():
                plans = []

                def schema_rules(schema):
                    checks: list | None = [] if track else None
                    out = schema_to_rules(
                        schema,
                        any_whitespace=any_whitespace,
                        max_whitespace_cnt=max_whitespace_cnt,
                        max_number_digits=max_number_digits,
                        checks=checks,
                    )
                    plans.append(checks[0] if checks else None)
                    return out

                rules, root = structural_tag_rules(tag, schema_rules)
                if not any(plans):
                    return rules, root
                encoded = [(_utf8(b), _utf8(e)) for b, _, e in structures]
                return (
                    rules,
                    root,
                    unique_items.TaggedPlan(
                        [_utf8(t) for t in triggers],
                        [b for b, _ in encoded],
                        [e for _, e in encoded],
                        plans,
                    ),
                )

            key = ("structural_tag", text, any_whitespace, max_whitespace_cnt, max_number_digits)
            return self._cached(key, build)

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON value."""
        return self.compile_json_schema({})

    def compile_ebnf(
        self, grammar: str, start: str = "start", *, budget: CompileBudget | None = None
    ) -> CompiledGrammar:
        """A grammar in lark's EBNF syntax, matched at the character level (%import serves
        lark's standard library only)."""
        from grammars.ebnf import lark_to_rules

        _check_size(budget, grammar)
        with running(budget):
            checkpoint()
            return self._cached(("ebnf", grammar, start), lambda: lark_to_rules(grammar, start))


class _MachineBuilder(GrammarCompiler):
    """GrammarCompiler's compile_* methods without a vocabulary or a cache: each stops at the
    vocabulary-free Machine."""

    def __init__(self):  # nothing to hold
        pass

    def _cached(self, key: tuple, build) -> Machine:
        return _machine(build)


CONSTRAINT_KINDS = ("json_schema", "regex", "ebnf", "choices", "structural_tag")


def build_machine(kind: str, spec, *, budget: CompileBudget | None = None, **options) -> Machine:
    """The automaton of one constraint (`kind`: one of CONSTRAINT_KINDS, with the argument and
    keyword options its compile_* method takes), built without a vocabulary and picklable, so
    that another process can build it; CompiledGrammar(machine, compiler.vocab) makes it
    usable."""
    if kind not in CONSTRAINT_KINDS:
        raise GrammarError(f"unknown constraint kind {kind!r}")
    return getattr(_MachineBuilder(), f"compile_{kind}")(spec, budget=budget, **options)


def _machine(build) -> Machine:
    """Machine(*build()), where build() gives (rules, root) or (rules, root, UniquePlan)."""
    collecting = gc.isenabled()
    gc.disable()  # compilation allocates many small lists; cyclic GC passes dominate
    try:
        rules, root, *checks = build()
        machine = Machine(rules, root)
        if checks:  # uniqueItems left to the matcher (grammars/unique_items.py)
            machine.unique = checks[0]
        # free the expression trees while collection is off: once it is back on, a pass
        # would first walk everything still alive that the compile allocated
        del rules
        return machine
    except RecursionError:
        raise GrammarError("constraint nested too deeply") from None
    finally:
        if collecting:
            gc.enable()


def schema_text(schema, plain: bool = False) -> str:
    """A decoded schema as compact JSON text, keys in their order (properties come in schema
    order, so order is meaning): the grammar cache's key, which the builder also scans for
    keywords. A `plain` schema (json_schema.check_depth: JSON's values and containers only,
    no NaN or infinity, which orjson would write as null) is written by orjson, ~10x faster
    than json.dumps, unless orjson refuses it (integers beyond 64 bits, keys that are not
    strings, lone surrogates); json.dumps writes those and every other schema, so that no two
    schemas share a text and objects JSON has not are refused as before."""
    try:
        return orjson.dumps(schema).decode() if plain else _dumps(schema)
    except TypeError:  # orjson.JSONEncodeError
        return _dumps(schema)


def _dumps(schema) -> str:
    try:
        return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:  # an integer too long to write
        raise GrammarError(f"schema cannot be written as JSON: {exc}") from None


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _not_json(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_size(budget: CompileBudget | None, text: str) -> None:
    if budget is not None and budget.max_bytes is not None:
        budget.check_size(len(text.encode("utf-8", "surrogatepass")))


def _choices_rules(choices: list[str]) -> tuple[dict, str]:
    if len(choices) < _MIN_CHOICE_SET:
        return {"root": alt(*(lit(c) for c in choices))}, "root"
    return {"root": ("dfa", minimal_dfa(tuple(c.encode("utf-8")) for c in choices))}, "root"


_WARM_UP_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string", "maxLength": 4}, "b": {}},
    "required": ["a"],
}


def warm_up_builds() -> None:
    """Load (or compile) the kernels that building a machine runs, without a vocabulary: what
    a process that only builds machines (runtime/scheduler/compile_worker.py) does at start,
    so that its first compile does not pay for them (nor its first machine sent, pickled with
    the NFA's arrays read out of their box)."""
    build_machine("json_schema", _WARM_UP_SCHEMA).__getstate__()
    build_machine("regex", "[a-z]{3,6}|x+")
    build_machine("ebnf", 'start: "a" /[0-9]+/ | "b"')


def warm_up() -> None:
    """Compile the mask kernels now, with a small made-up vocabulary (numba keeps them on disk,
    so this costs seconds once per install and a fraction of a second after); a server calls it
    at start so the first constrained request does not wait for it."""
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b'", "', "é日".encode(), b"\\u00e9"]
    tokens += [b"1]", b'"}', b"]}", b"1, 2", b'[{"', b'{"a']  # leaving frames: pops checked
    tokens.append(b"")  # EOS, as a tokenizer's special tokens are read
    eos = frozenset({len(tokens) - 1})
    info = TokenizerInfo(tuple(tokens), eos, eos, "byte_level")
    compiler = GrammarCompiler(info)
    grammar = compiler.compile_json_schema(_WARM_UP_SCHEMA)
    matcher = grammar.matcher()
    for byte in b'{"a": "ab", "b": [1, {"c": [2, "x"]}]}':  # a byte's token id is the byte
        matcher.next_token_mask()
        matcher.accept_token(byte)
    matcher.next_token_mask()  # the end: EOS set in the mask
    grammar.matcher().find_jump_forward_string()  # the bytes a state can read (set_reads)
    # kernels the masks above need not reach: the stack tables' and the DFA's growth, and the
    # start states interned again when a grammar has more than a new DFA's room (zero here)
    pda.grown(pda.new_arrays(4))
    lazydfa_arrays.grown(grammar.machine.dfa, len(grammar.machine.dfa.accept))
    nothing = np.zeros(0, np.int64)
    intern_starts(grammar.machine.nfa_box, grammar.machine.dfa, nothing, nothing)
    boxes.nfa_box(grammar.machine.arrays)  # (and its box again: a machine unpickled)
