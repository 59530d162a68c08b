"""Compile limits: a CompileBudget's timeout, cancel event and size limit; large enums and
anyOf/oneOf of constants compiled exactly; deep nesting refused with GrammarError; %import
never reads a file the user names."""

import builtins
import io
import json
import os
import random
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammars import CompileBudget, GrammarCancelled, GrammarError, GrammarTimeout

# Constraints that take far longer than any test waits (seconds to minutes) without a budget.
SLOW_EBNF = "start: " + " ".join(['("a" | "b")'] * 24)  # lark expands 2**24 alternatives
SLOW_REGEX = "|".join(f"w{i}x" for i in range(150_000))


def slow_schema(n: int = 3000) -> dict:
    """Many string branches, each with its own pattern: seconds of work in the regex and NFA
    passes (3000 branches: ~5 s here), yet under the automaton size limit, so a compile that
    is not stopped succeeds. (Branches of objects now hit the size limit within 0.4 s.)"""
    return {"anyOf": [{"type": "string", "pattern": f"^w{i}x[a-z]{{3,9}}$"} for i in range(n)]}


SLOW = {
    "json_schema": lambda c, b: c.compile_json_schema(slow_schema(), budget=b),
    "regex": lambda c, b: c.compile_regex(SLOW_REGEX, budget=b),
    "ebnf": lambda c, b: c.compile_ebnf(SLOW_EBNF, budget=b),
}


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


# -- budget ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(SLOW))
def test_timeout_stops_a_long_compile(compiler, kind):
    with pytest.raises(GrammarTimeout, match="took longer than 0.3 s") as info:
        SLOW[kind](compiler, CompileBudget(timeout=0.3))
    assert isinstance(info.value, GrammarError)


@pytest.mark.parametrize("kind", sorted(SLOW))
def test_cancel_from_another_thread_stops_a_running_compile(compiler, kind):
    cancel = threading.Event()
    thread, out = _in_thread(lambda: SLOW[kind](compiler, CompileBudget(cancel=cancel)))
    thread.join(0.3)
    assert thread.is_alive()  # still compiling
    cancel.set()
    thread.join(5)  # generous: it must return, not hang
    assert not thread.is_alive()
    assert isinstance(out.get("error"), GrammarCancelled), out


def test_cancelled_compile_leaves_nothing_cached_and_the_compiler_works(compiler, checker):
    schema = slow_schema()
    cancel = threading.Event()
    thread, out = _in_thread(
        lambda: compiler.compile_json_schema(schema, budget=CompileBudget(cancel=cancel))
    )
    thread.join(0.3)
    cancel.set()
    thread.join(5)
    assert isinstance(out.get("error"), GrammarCancelled), out
    # compiled again from the start: a cached grammar would come back at once
    again = threading.Event()
    timer = threading.Timer(0.3, again.set)
    timer.start()
    with pytest.raises(GrammarCancelled):
        compiler.compile_json_schema(schema, budget=CompileBudget(cancel=again))
    timer.join()
    grammar = compiler.compile_json_schema({"type": "array", "items": {"enum": ["x", 2]}})
    assert checker.accepts(grammar, ["x", 2, 2])
    assert not checker.accepts(grammar, ["y"])


def test_a_spent_budget_stops_even_a_cached_compile(compiler):
    cancel = threading.Event()
    compiler.compile_regex("[0-9]+", budget=CompileBudget(cancel=cancel))
    cancel.set()
    with pytest.raises(GrammarCancelled, match="cancelled"):
        compiler.compile_regex("[0-9]+", budget=CompileBudget(cancel=cancel))
    with pytest.raises(GrammarTimeout):
        compiler.compile_regex("[0-9]+", budget=CompileBudget(timeout=0))
    assert compiler.compile_regex("[0-9]+", budget=CompileBudget(timeout=60))


def test_concurrent_compiles_each_see_their_own_budget(compiler, checker):
    slow, slow_out = _in_thread(
        lambda: compiler.compile_json_schema(slow_schema(), budget=CompileBudget(timeout=0.5))
    )
    other, other_out = _in_thread(lambda: compiler.compile_json_schema(slow_schema(300)))
    slow.join(10)
    other.join(120)
    assert isinstance(slow_out.get("error"), GrammarTimeout)
    assert checker.accepts(other_out["result"], json.dumps("w299xabc"), check_masks=False)
    assert not checker.accepts(other_out["result"], json.dumps("w300xabc"), check_masks=False)
    assert not checker.accepts(other_out["result"], {"k": 300}, check_masks=False)


def test_max_bytes_is_checked_before_any_work(compiler):
    budget = CompileBudget(max_bytes=100)
    # over the limit and unsupported: the size is reported, so nothing was compiled
    big = {"if": {}, "description": "x" * 200}
    for schema in (big, json.dumps(big)):
        with pytest.raises(GrammarError, match="above the limit of 100 bytes"):
            compiler.compile_json_schema(schema, budget=budget)
    with pytest.raises(GrammarError, match="above the limit of 100 bytes"):
        compiler.compile_regex("(" * 200, budget=budget)
    with pytest.raises(GrammarError, match="above the limit of 100 bytes"):
        compiler.compile_ebnf("start: " + '"a" ' * 50, budget=budget)
    with pytest.raises(GrammarError, match="above the limit of 100 bytes"):
        compiler.compile_choices(["é" * 30, "b" * 50], budget=budget)  # 110 bytes in UTF-8
    assert compiler.compile_json_schema({"enum": ["a", "b"]}, budget=budget)
    assert compiler.compile_regex("[ab]+", budget=budget)
    assert compiler.compile_choices(["é" * 25, "b" * 50], budget=budget)


# -- large sets of constants ----------------------------------------------------------------
WORDS = ["alpha", "beta", "gamma", "delta", "omega"]


def _enum_values(n: int) -> list[str]:
    rng = random.Random(n)
    return [f"value-{i:06d}-{rng.choice(WORDS)}" for i in range(n)]


@pytest.mark.parametrize("form", ["enum", "anyOf", "oneOf"])
def test_large_set_of_string_constants(compiler, smollm2_tokenizer, checker, form):
    values = _enum_values(5000)
    schema = {"enum": values} if form == "enum" else {form: [{"const": v} for v in values]}
    grammar = compiler.compile_json_schema(schema)
    for text in values:  # every member, token by token
        matcher = grammar.matcher()
        ids = smollm2_tokenizer.encode(json.dumps(text), add_special_tokens=False)
        assert all(matcher.accept_token(t) for t in ids), text
        assert matcher.is_completed()
    for text in values[::250]:  # masks agree with accept_token on a sample
        assert checker.accepts(grammar, json.dumps(text))
    for text in ["value-000001-zeta", "value-000001", "value-0000011-alpha", values[0] + "x"]:
        assert not checker.accepts(grammar, json.dumps(text)), text


def _spellings(value) -> list[str]:
    """JSON texts of `value` the engine accepts: non-ASCII raw, and escaped where it is not
    above U+FFFF (an escaped surrogate pair is not accepted for constants)."""
    out = [json.dumps(value, ensure_ascii=False)]
    if not any(ord(c) > 0xFFFF for c in json.dumps(value, ensure_ascii=False)):
        out.append(json.dumps(value))
    return out


def test_mixed_constants_keep_their_exact_spellings(compiler, checker):
    strings = ["", 'a"b', "back\\slash", "tab\tnew\nline", "\x01\x7f", "é日本", "😀", "/x"]
    values = strings + [0, -1, 2.5, 1e-7, 10**17, True, False, None, [1, "a"], {"k": [None]}]
    values += [f"filler-{i}" for i in range(40)]  # enough to build one automaton
    grammar = compiler.compile_json_schema({"enum": values})
    for v in values:
        for text in _spellings(v):
            assert checker.accepts(grammar, text), text
    for text in ['"\\u00E9\\u65E5\\u672c"', "0.0", "-1.0", "100000000000000000.0"]:
        m = grammar.matcher()  # escapes in either case; integers also written with ".0"
        assert m.accept_string(text) and m.is_completed(), text
    for v in ['a\\"b', "/", 3, 2.50001, "true", [1], "\\/x", "FILLER-1", "é日"]:
        assert not checker.accepts(grammar, json.dumps(v)), v


def test_one_of_overlapping_constants_match_neither(compiler, checker):
    """A constant named by two branches matches two: refused, the others accepted."""
    values = [f"v{i}" for i in range(100)]
    grammar = compiler.compile_json_schema({"oneOf": [{"const": v} for v in values + ["v7"]]})
    assert not checker.accepts(grammar, '"v7"')
    assert checker.accepts(grammar, '"v6"') and checker.accepts(grammar, '"v99"')
    # 1 and 1.0 are the same JSON number
    grammar = compiler.compile_json_schema(
        {"oneOf": [{"const": i} for i in range(40)] + [{"const": 1.0}]}
    )
    assert not any(checker.accepts(grammar, t) for t in ("1", "1.0"))
    assert checker.accepts(grammar, "2") and checker.accepts(grammar, "39")
    grammar = compiler.compile_json_schema({"oneOf": [{"const": v} for v in [*values, True, 1]]})
    m = grammar.matcher()
    assert m.accept_string("true") and m.is_completed()


def test_large_choices(compiler, checker):
    choices = [f"choice {i} {WORDS[i % 5]}" for i in range(3000)] + ["", "é"]
    grammar = compiler.compile_choices(choices)
    for text in choices[::97] + ["é"]:
        assert checker.accepts(grammar, text), text
    for text in ["choice 1 alpha", "choice 3000 alpha", "choice 12 gamma!", "e"]:
        assert not checker.accepts(grammar, text), text


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=st.sets(st.text(alphabet='ab"\\é\n\x00😀', max_size=5), min_size=32, max_size=60),
    others=st.lists(st.text(alphabet='ab"\\é\n\x00😀', max_size=6), max_size=20),
)
def test_string_sets_accept_exactly_their_members(compiler, members, others):
    grammar = compiler.compile_json_schema({"enum": sorted(members)})
    for text in members:
        for spelling in _spellings(text):
            m = grammar.matcher()
            assert m.accept_string(spelling) and m.is_completed(), spelling
    for text in others:
        if text not in members:
            m = grammar.matcher()
            assert not (m.accept_string(json.dumps(text)) and m.is_completed()), text


def test_pattern_properties_are_matched_without_backtracking(compiler, checker):
    name = "a" * 64 + "!"  # re.search("(a+)+$", name) would backtrack for ages, holding the GIL
    schema = {
        "type": "object",
        "properties": {name: {"type": "integer"}, "aaa": {}},
        "patternProperties": {"(a+)+$": {"type": "string"}},
        "additionalProperties": False,
    }
    grammar = compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, json.dumps({name: 1, "aaa": "x", "aa": "y"}))
    assert not checker.accepts(grammar, json.dumps({"aaa": 1}))  # "aaa" matches the pattern
    assert not checker.accepts(grammar, json.dumps({"b": "x"}))


# -- deep nesting ---------------------------------------------------------------------------
def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for i in range(depth):
        schema = {"type": "array", "items": schema} if i % 2 else {"properties": {"a": schema}}
    return schema


@pytest.fixture
def high_recursion_limit():
    """Python's limit raised, as a host program may do: the engine's own limits must hold."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    yield
    sys.setrecursionlimit(old)


@pytest.mark.parametrize("depth", [5000, 100_000])
def test_deeply_nested_schema_is_refused(compiler, high_recursion_limit, depth):
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_json_schema(_nested(depth))
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_json_schema('{"items":' * depth + "{}" + "}" * depth)


def test_long_reference_chain_is_refused(compiler, high_recursion_limit):
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(5000)}
    defs["d5000"] = {"type": "string"}
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_json_schema({"$defs": defs, "$ref": "#/$defs/d0"})


def test_moderately_nested_schema_compiles(compiler, checker):
    grammar = compiler.compile_json_schema(_nested(60))
    value = "x"
    for i in range(60):
        value = [value] if i % 2 else {"a": value}
    assert checker.accepts(grammar, value, check_masks=False)


def test_deeply_nested_regex_and_grammar_are_refused(compiler, high_recursion_limit):
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_regex("(" * 10_000 + "a" + ")" * 10_000)
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_regex("(?:a" * 10_000 + ")*" * 10_000)
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_ebnf("start: " + "(" * 10_000 + '"a"' + ")" * 10_000)
    with pytest.raises(GrammarError, match="nested"):
        compiler.compile_ebnf("start: " + "[" * 10_000 + '"a"' + "]" * 10_000)
    # brackets inside strings, regexps and comments do not count
    grammar = compiler.compile_ebnf('start: "((((" /[(]+/ // ' + "(" * 500 + "\n")
    assert grammar.matcher().accept_string("(((((((")


# -- %import --------------------------------------------------------------------------------
@pytest.fixture
def opened(monkeypatch):
    """Every path opened through open / io.open / os.open (clear it before the code watched)."""
    paths = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *args, **kwargs):
        paths.append(os.fspath(file) if not isinstance(file, int) else file)
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        paths.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return paths


@pytest.mark.parametrize(
    "statement", ["%import mine.WORD", "%import .mine.WORD", "%import mine (WORD)", "%import a.b.C"]
)
def test_import_of_a_user_file_is_refused(compiler, tmp_path, monkeypatch, opened, statement):
    (tmp_path / "mine.lark").write_text('WORD: "secret"\n')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.lark").write_text('C: "secret"\n')
    monkeypatch.chdir(tmp_path)  # where lark looks last for an absolute import
    # where lark looks for a relative import from a grammar given as text
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(tmp_path / "m.py"), raising=False)
    opened.clear()
    with pytest.raises(GrammarError, match="%import"):
        compiler.compile_ebnf(f"start: WORD\n{statement}\n")
    assert not [p for p in opened if isinstance(p, str) and str(tmp_path) in os.path.abspath(p)]


def test_standard_library_imports_still_work(compiler, tmp_path, monkeypatch, opened):
    (tmp_path / "common.lark").write_text('NUMBER: "hijacked"\n')
    monkeypatch.chdir(tmp_path)
    opened.clear()
    grammar = compiler.compile_ebnf(
        "start: NUMBER (_WS NUMBER)*\n"
        "%import common.NUMBER\n"
        "%import common (WS_INLINE, LETTER)\n"
        "_WS: WS_INLINE\n"
    )
    m = grammar.matcher()
    assert m.accept_string("12 3.5  7") and m.is_completed()
    assert not grammar.matcher().accept_string("hijacked")
    assert not [p for p in opened if isinstance(p, str) and str(tmp_path) in os.path.abspath(p)]


def test_schema_of_shared_subobjects_is_refused_without_a_byte_limit(compiler):
    """A decoded schema whose subobjects are shared (2**40 places, one object each level): json.dumps
    and the walks would never end, with or without a budget."""
    from grammars.json_schema.core import MAX_CONTAINERS

    schema = {"type": "string"}
    for _ in range(40):
        schema = {"anyOf": [schema, schema]}
    with pytest.raises(GrammarError, match=f"more than {MAX_CONTAINERS} objects and arrays"):
        compiler.compile_json_schema(schema)
