"""Matchers: masks agree with accept_token over the whole vocabulary, jump-forward strings,
rollback, EOS and special tokens, regex / EBNF / choices, bitmask formats, caching."""

import dataclasses
import datetime
import enum
import json
import random
import re
import uuid

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grammars import GrammarError
from grammars.json_schema.counted import _BLOCK
from grammars.lazydfa_chain import CHAR_STEPS
from tests.grammars.conftest import assert_mask_is_exact

CALC = r"""
?start: sum
?sum: product | sum "+" product | sum "-" product
?product: atom | product "*" atom | product "/" atom
?atom: NUMBER | "-" atom | "(" sum ")"
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"""


def _states(grammar, tok, text):
    """Matchers after each token of `text`."""
    m = grammar.matcher()
    out = [m.state]
    for t in tok.encode(text, add_special_tokens=False):
        assert m.accept_token(t)
        out.append(m.state)
    return out


@pytest.mark.parametrize(
    "kind,spec,text",
    [
        (
            "json",
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {}}},
            },
            '{"name": "Zoë \\"x\\"", "tags": [1, {"a": null}, "s"]}',
        ),
        ("regex", r"[a-z]+@[a-z]+\.(com|org) \d{2,4}", "bob@example.org 123"),
        ("ebnf", CALC, "(12 + 3) * -4.5"),
        (  # length counters: token walks jump along the chain of counter states
            "json",
            {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "minLength": 3, "maxLength": 24},
                    "sensorId": {"type": "string"},
                    "sensorName": {"type": "string", "pattern": "^[a-z]+[0-9]*$"},
                },
            },
            '{"code": "abc defé\\n ghijk lmnopqrs", "sensorName": "abc12", "extra": 1}',
        ),
        (  # multi-byte characters inside a string loop are jumped over wholesale
            "json",
            {"type": "object", "properties": {"s": {"type": "string"}, "t": {"maxLength": 3}}},
            '{"s": "Zoë — 日本語 🙂\\u00e9 ok", "t": "ab", "ü": 1}',
        ),
    ],
)
def test_masks_agree_with_accept_token_on_every_token(
    compiler, smollm2_tokenizer, kind, spec, text
):
    grammar = {
        "json": compiler.compile_json_schema,
        "regex": compiler.compile_regex,
        "ebnf": compiler.compile_ebnf,
    }[kind](spec)
    states = _states(grammar, smollm2_tokenizer, text)
    rng = random.Random(0)
    # every state of the cases that exercise jumps through chains, six of the others
    jumps = kind == "json" and spec["properties"].keys() & {"code", "s"}
    picked = states if jumps else rng.sample(states, 6)
    for state in picked:
        assert_mask_is_exact(grammar, state, kind)


def test_jump_forward_strings(compiler):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    }
    m = compiler.compile_json_schema(schema, any_whitespace=False).matcher()
    assert m.find_jump_forward_string() == '{"name": "'
    m = compiler.compile_json_schema(schema, any_whitespace=False).matcher()
    assert m.accept_string('{"na')
    assert m.find_jump_forward_string() == 'me": "'
    m = compiler.compile_json_schema(schema).matcher()  # whitespace allowed: only the key
    assert m.accept_string('{"na') and m.find_jump_forward_string() == 'me"'
    m = compiler.compile_choices(["yes please", "yes thanks"]).matcher()
    assert m.find_jump_forward_string() == "yes "
    m = compiler.compile_regex(r"ab(c|d)").matcher()
    assert m.find_jump_forward_string() == "ab"
    m = compiler.compile_json_schema({"enum": ["größe"]}, any_whitespace=False).matcher()
    assert m.accept_string('"gr') and m.find_jump_forward_string() == ""  # raw or \u00f6
    m = compiler.compile_regex("ab").matcher()
    assert m.accept_string("ab") and m.find_jump_forward_string() == ""


def test_rollback_restores_exact_state(compiler, smollm2_tokenizer):
    grammar = compiler.compile_json_schema({"type": "array", "items": {"type": "integer"}})
    ids = smollm2_tokenizer.encode("[1, 22, 333, 4444, 5, 6, 7, 8, 9, 10, 11, 12]")
    m = grammar.matcher()
    snapshots = []
    for t in ids:
        snapshots.append((m.state, m.next_token_mask().copy(), m.find_jump_forward_string()))
        assert m.accept_token(t)
    for n in range(1, min(32, len(ids)) + 1):
        m.rollback(1)
        state, mask, jump = snapshots[-n]
        assert m.state == state
        assert (m.next_token_mask() == mask).all() and m.find_jump_forward_string() == jump
    with pytest.raises(ValueError):
        m.rollback(len(ids) + 5)


def test_refusal_leaves_state_unchanged_and_eos_only_at_the_end(compiler, smollm2_tokenizer):
    tok = smollm2_tokenizer
    grammar = compiler.compile_regex(r"\d+")
    m = grammar.matcher()
    eos = tok.eos_token_id
    assert not m.accept_token(eos)  # empty is not a match
    before = m.state
    assert not m.accept_token(tok.encode("x")[0]) and m.state == before
    specials = [i for i in compiler.vocab.special_set if i < compiler.vocab.size]
    assert specials and not any(m.accept_token(i) for i in specials)
    assert m.accept_token(tok.encode("42")[0])
    assert m.next_token_mask()[eos]
    assert m.accept_token(eos) and m.is_terminated()
    assert not m.accept_token(tok.encode("1")[0])
    assert m.next_token_mask().sum() == 1  # only EOS after termination
    m.rollback(1)
    assert not m.is_terminated() and m.accept_token(tok.encode("1")[0])


def test_bitmask_formats(compiler):
    g = compiler.compile_regex("a|b")
    words = compiler.vocab.words
    ref = np.zeros(words, np.int32)
    g.matcher().fill_next_token_bitmask(ref)
    batch = torch.zeros((3, words), dtype=torch.int32)
    g.matcher().fill_next_token_bitmask(batch, index=2)
    assert (batch[2].numpy() == ref).all() and not batch[:2].any()
    one = torch.full((words,), -1, dtype=torch.int32)
    g.matcher().fill_next_token_bitmask(one)
    assert (one.numpy() == ref).all()


def test_memoised_token_steps_match_fresh_walks(compiler, smollm2_tokenizer):
    """A token read a second time from a state takes the memoised step: the same state as the
    walk, while refused tokens, EOS and out-of-range ids are never memoised."""
    grammar = compiler.compile_json_schema({"type": "array", "items": {"enum": ["ab", "cd"]}})
    ids = smollm2_tokenizer.encode('["ab", "cd", "ab", "cd", "ab"]')
    first = grammar.matcher()
    states = [first.state]
    for t in ids:
        assert first.accept_token(t)
        states.append(first.state)
    assert len(grammar._token_steps) > 0
    again = grammar.matcher()
    size = compiler.vocab.size
    for t, prev, state in zip(ids, states, states[1:]):
        assert prev * size + t in grammar._token_steps
        assert again.accept_token(t) and again.state == state
        assert grammar.walk(prev, compiler.vocab.token_bytes[t]) == state
    bad = smollm2_tokenizer.encode("x")[0]
    before = again.state
    for t in (bad, bad, -1, compiler.vocab.size + 7):
        assert not again.accept_token(t) and again.state == before
    key = next(iter(grammar._token_steps))
    probe = grammar.matcher()
    probe._history = [key // size + 1]  # the same key from the next state and a negative id
    assert not probe.accept_token(key % size - size)
    memoised_tokens = {key % size for key in grammar._token_steps}
    assert bad not in memoised_tokens
    eos = smollm2_tokenizer.eos_token_id
    assert again.accept_token(eos) and not again.accept_token(eos)
    assert eos not in {key % size for key in grammar._token_steps}


def test_wider_numpy_bitmask_zeroes_its_tail(compiler):
    g = compiler.compile_regex("a|b")
    words = compiler.vocab.words
    ref = np.zeros(words, np.int32)
    g.matcher().fill_next_token_bitmask(ref)
    wide = np.full(words + 5, -1, np.int32)
    g.matcher().fill_next_token_bitmask(wide)
    assert (wide[:words] == ref).all() and not wide[words:].any()


def test_partial_utf8_tokens(compiler, smollm2_tokenizer):
    """Tokens holding part of a character are allowed mid-character and the rest must follow."""
    vocab = compiler.vocab
    g = compiler.compile_regex("é+")
    m = g.matcher()
    mask = m.next_token_mask()
    first_byte = [i for i, b in enumerate(vocab.token_bytes) if b == b"\xc3"]
    assert first_byte and mask[first_byte[0]]
    assert m.accept_token(first_byte[0])
    nxt = m.next_token_mask()
    allowed = [vocab.token_bytes[i] for i in np.nonzero(nxt)[0]]
    assert allowed and all(b.startswith(b"\xa9") for b in allowed)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([r"[a-c]{2,4}x?", r"(ab|a)*c", r"\d{3}-\d{4}", r"[^x]{0,3}y", r"(?i)hi+"]),
    st.text(alphabet="abcxyhiHI0123456789-é", max_size=8),
)
def test_regex_agrees_with_python(compiler, pattern, text):
    m = compiler.compile_regex(pattern).matcher()
    ours = m.accept_string(text) and m.is_completed()
    assert ours == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_ebnf_calculator(compiler, checker):
    g = compiler.compile_ebnf(CALC)
    for text in ["1", "1 + 2*3", "(1+2) * -3.5", " 7 "]:
        assert checker.accepts(g, text), text
    for text in ["", "1 +", "1 + * 2", "(1"]:
        assert not checker.accepts(g, text), text
    with pytest.raises(GrammarError):
        compiler.compile_ebnf("start: undefined_rule")
    with pytest.raises(GrammarError):
        compiler.compile_ebnf("start: a\na: start 'x' | 'y'")  # indirect left recursion


def test_ebnf_json_like_recursion(compiler, checker):
    grammar = r"""
    start: value
    value: dict | list | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
    list : "[" [value ("," value)*] "]"
    dict : "{" [pair ("," pair)*] "}"
    pair : ESCAPED_STRING ":" value
    %import common.ESCAPED_STRING
    %import common.SIGNED_NUMBER
    %import common.WS
    %ignore WS
    """
    g = compiler.compile_ebnf(grammar)
    doc = {"a": [1, 2, {"b": None}], "c": "d"}
    assert checker.accepts(g, json.dumps(doc))
    assert not checker.accepts(g, '{"a": }')


def test_choices(compiler, checker):
    g = compiler.compile_choices(["yes", "no", "maybe later"])
    for text in ["yes", "no", "maybe later"]:
        assert checker.accepts(g, text)
    assert not checker.accepts(g, "maybe")
    with pytest.raises(GrammarError):
        compiler.compile_choices([])


def test_compiled_grammars_are_cached_and_shared(compiler):
    a = compiler.compile_json_schema({"type": "integer"})
    b = compiler.compile_json_schema('{"type": "integer"}')
    assert a is b
    m1, m2 = a.matcher(), a.matcher()
    assert m1.accept_string("12") and m2.state == a.initial
    m1.reset()
    assert m1.state == a.initial and not m1.is_completed()
    any_json = compiler.compile_builtin_json_grammar()
    m = any_json.matcher()
    assert m.accept_string('[1, {"a": null}]') and m.is_completed()


class _Color(enum.Enum):
    RED = "red"


class _Kind(enum.Enum):
    STRING = "string"


@dataclasses.dataclass
class _Point:
    x: int
    y: int


def test_schema_texts_keep_apart_schemas_that_differ():
    # the grammar cache's key: compact JSON, keys in their order, written by orjson for plain
    # JSON or by json.dumps, for what orjson refuses or would write as null and for anything
    # but plain JSON
    from grammars.compiler import schema_text
    from grammars.json_schema import check_depth

    schema = {"type": "object", "properties": {"b": {"const": 1.5e300}, "a": {"enum": ["é"]}}}
    assert check_depth(schema, 8)
    assert schema_text(schema, True) == json.dumps(
        schema, ensure_ascii=False, separators=(",", ":")
    )
    distinct = [
        {"const": None},
        {"const": float("nan")},
        {"const": float("inf")},
        {"const": float("-inf")},
        {"const": [None]},
        {"const": [float("nan")]},
        {"const": "null"},
        {"const": 2**70},
        {"const": 2**70 + 1},
        {"const": "\ud800"},
        {"const": "\ud801"},
        {"b": 1, "a": 2},
        {"a": 2, "b": 1},
    ]
    texts = [schema_text(s, check_depth(s, 8)) for s in distinct]
    assert len(set(texts)) == len(texts)
    assert schema_text({1: "x"}, True) == '{"1":"x"}'  # as json.dumps writes it
    with pytest.raises(GrammarError, match="cannot be written as JSON"):
        schema_text({"const": 10**5000}, True)
    # objects JSON has not: not plain, and refused as json.dumps refuses them (orjson writes
    # enum members and UUIDs as values, dates as strings, dataclasses as objects)
    for odd in (_Color.RED, uuid.UUID(int=5), datetime.date(2020, 1, 1), _Point(1, 2)):
        for place in ({"const": odd}, {"a": [1, {"default": odd}]}, odd):
            assert not check_depth(place, 8)
            with pytest.raises(TypeError):
                schema_text(place, False)
    assert not check_depth({"type": ("string", "null")}, 8)  # a tuple: json.dumps writes it
    for odd in (float("nan"), float("inf"), -float("inf")):  # orjson would write null
        assert not check_depth({"a": [{"const": odd}]}, 8) and not check_depth(odd, 8)
    assert check_depth(True, 8) and check_depth([{"a": [1.5, None, "x"]}], 8)


def test_schemas_holding_objects_json_has_not_are_refused_whatever_the_cache_holds(compiler):
    from grammars import GrammarCompiler

    fresh = GrammarCompiler(compiler.vocab.info)
    fresh.compile_json_schema({"type": "string"})  # the twin an enum member would be keyed as
    with pytest.raises(TypeError):
        fresh.compile_json_schema({"type": _Kind.STRING})


def test_a_compiler_without_a_cache_compiles_each_time(compiler):
    from grammars import GrammarCompiler

    uncached = GrammarCompiler(compiler.vocab.info, cache_size=0)
    a = uncached.compile_json_schema({"type": "integer"})
    b = uncached.compile_json_schema({"type": "integer"})
    assert a is not b and a.matcher().accept_string("12") and b.matcher().accept_string("-3")
    for bad in (-1, 1.5, "64", None):
        with pytest.raises(ValueError, match="cache_size"):
            GrammarCompiler(compiler.vocab.info, cache_size=bad)


def test_sentencepiece_byte_fallback_vocabulary(sentencepiece_tokenizer):
    from grammars import GrammarCompiler

    hf, vocab = sentencepiece_tokenizer
    gc = GrammarCompiler(hf)
    g = gc.compile_regex(" (a|b)+ é")
    m = g.matcher()
    for tid in hf.encode("ab é", add_special_tokens=False):  # "▁a", "b", "▁", <0xC3>, <0xA9>
        assert m.next_token_mask()[tid] and m.accept_token(tid)
    assert m.is_completed() and m.accept_token(2)
    m = g.matcher()
    assert m.accept_string(" a ")
    allowed = np.nonzero(m.next_token_mask())[0].tolist()
    assert allowed == [vocab["<0xC3>"]]  # only the first byte of é can follow


def test_one_grammar_shared_by_threads(compiler, smollm2_tokenizer):
    """Matchers of one compiled grammar in several threads build its automaton and masks at the
    same time and get the masks a single thread gets."""
    from concurrent.futures import ThreadPoolExecutor

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "integer"},
        },
    }
    text = '{"name": "Zoë and the threads", "tags": ["a", "bé", "c"], "n": 12}'
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
    shared = compiler.compile_json_schema(schema)

    def masks(grammar):
        m = grammar.matcher()
        out = []
        for t in ids:
            out.append(m.next_token_mask())
            assert m.accept_token(t)
        return out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: masks(shared), range(16)))
    reference = masks(compiler.compile_json_schema({**schema, "title": "reference"}))
    for result in results:
        assert all(np.array_equal(a, b) for a, b in zip(result, reference, strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=5), min_size=1, max_size=40))
def test_trie_subtree_ends(tokens):
    """A prefix that dies at byte i of row j kills exactly the rows up to ends[ptr[j] + i]."""
    from grammars.vocabulary import make_trie

    rows = np.zeros((len(tokens), 5), np.uint8)
    for i, t in enumerate(tokens):
        rows[i, : len(t)] = list(t)
    lengths = np.array([len(t) for t in tokens], np.int64)
    trie = make_trie(np.arange(len(tokens)), rows, lengths)
    data = [bytes(trie.data[trie.ptr[j] : trie.ptr[j + 1]]) for j in range(len(tokens))]
    for j, row in enumerate(data):
        for i in range(int(trie.lcp[j]), len(row)):
            end = j + 1
            while end < len(data) and data[end][: i + 1] == row[: i + 1]:
                end += 1
            assert trie.ends[trie.ptr[j] + i] == end


@settings(max_examples=80, deadline=None)
@given(
    st.lists(  # few byte values: suffixes sharing long prefixes
        st.lists(st.sampled_from([b"\x00", b"a", b"b", b"\xff"]), min_size=1, max_size=12).map(
            b"".join
        ),
        min_size=1,
        max_size=60,
    ),
    st.lists(st.integers(1, 5), min_size=60, max_size=60),
)
@example([b"aaaaaaaab", b"baaaaaaaa", b"bbaaaaaaaa"], [1] * 60)  # tied on their first 7 bytes
def test_exit_suffixes_are_the_trie_of_each_distinct_suffix(tokens, cuts):
    """A chain layout's suffixes (each row's bytes from its exit on): every distinct one once,
    in the order make_trie sorts them (a prefix first, bytes 0 and 255 included), with the
    trie's shared prefixes and subtree ends, and each row numbered by its own suffix."""
    from grammars.vocabulary import _exit_suffixes, make_trie

    width = max(map(len, tokens))
    rows = np.zeros((len(tokens), width), np.uint8)
    for i, t in enumerate(tokens):
        rows[i, : len(t)] = list(t)
    trie = make_trie(np.arange(len(tokens)), rows, np.array([len(t) for t in tokens], np.int64))
    data = [bytes(trie.data[trie.ptr[j] : trie.ptr[j + 1]]) for j in range(len(tokens))]
    picked = np.array([j for j in range(len(data)) if len(data[j]) > 1], np.int64)
    exits = np.array([min(cuts[j], len(data[j]) - 1) for j in picked], np.int64)
    suffix_of, suffixes = _exit_suffixes(trie, picked, exits)
    texts = [data[j][e:] for j, e in zip(picked.tolist(), exits.tolist())]
    unique = sorted(set(texts))
    matrix = np.zeros((max(len(unique), 1), width), np.uint8)
    for i, t in enumerate(unique):
        matrix[i, : len(t)] = list(t)
    lengths = np.array([len(t) for t in unique], np.int64)
    reference = make_trie(np.arange(len(unique)), matrix[: len(unique)], lengths)
    got = [bytes(suffixes.data[suffixes.ptr[j] : suffixes.ptr[j + 1]]) for j in suffixes.ids]
    assert got == unique == sorted(unique, key=lambda t: list(t))
    for name in ("ptr", "lcp", "group", "ends"):
        assert np.array_equal(getattr(suffixes, name), getattr(reference, name)), name
    assert [got[k] for k in suffix_of] == texts


def test_pushdown_arrays_keep_every_stack_set_and_step_through_growth(compiler):
    """The stacks, sets and steps of pda.py start small and grow (rehashing their tables)
    while a deeply nested document is read: every step made before a growth is still found
    after it, with the same result."""
    from grammars import pda

    grammar = compiler.compile_ebnf('start: "(" start ")" | "x"')
    start = grammar._pda.st_g.shape[0]
    m = grammar.matcher()
    assert m.accept_string("(" * 600 + "x" + ")" * 600)
    assert m.is_completed()
    p = grammar._pda
    assert p.st_g.shape[0] > start and int(p.meta[pda._STACKS]) > 600
    for key, val in grammar._steps.items():
        slot = pda._step_slot(p.step_keys, key)
        assert p.step_keys[slot] == key and p.step_vals[slot] == val
    assert p.step_keys[pda._step_slot(p.step_keys, (1 << 41) + 5)] == -1
    assert not grammar.matcher().accept_string("(" * 10 + "x" + ")" * 11)


@pytest.mark.parametrize(
    "schema, prefixes",
    [
        # length counters shorter than the longest token: the tokens that fit are allowed at
        # once, the longer ones walked from the counter's end (lazydfa_walk._walk_past_chain)
        ({"type": "string", "maxLength": 20}, ["", "ab", "abcdefghijklmnopq"]),
        ({"type": "string", "minLength": 18, "maxLength": 40}, ["", "x" * 17, "x" * 39]),
        ({"type": "string", "pattern": "^[a-z ]{16,30}!$"}, ["", "a" * 15, "a b" * 10]),
        # the counter ends where its bytes part ways: runs of spaces longer than it go on
        ({"type": "string", "pattern": "^[ a-z]{17}( [ a-z]*|a)$"}, ["", "  ", " b" * 5]),
        (
            {"type": "object", "properties": {"k": {"type": "string", "maxLength": 24}}},
            ['{"k": "', '{"k": "hello', '{"k": "' + "w" * 23],
        ),
    ],
)
def test_masks_on_length_counters_shorter_than_tokens(compiler, schema, prefixes):
    grammar = compiler.compile_json_schema(schema)
    for prefix in prefixes:
        m = grammar.matcher()
        text = prefix if prefix.startswith("{") else json.dumps(prefix)[:-1]
        assert m.accept_string(text), text
        assert_mask_is_exact(grammar, m.state, text)
    assert compiler.vocab._steps  # the masks took that path


@pytest.mark.parametrize(
    "schema, prefixes",
    [
        # counters of characters: tokens of multi-byte characters that fit are allowed at once
        # (lazydfa_chain.chain_info's CHARS), the others walked, near the counter's end too
        ({"type": "string", "maxLength": 21}, ["", "é", "日本", "ab" + "é" * 15, "x" * 19 + "ü"]),
        ({"type": "string", "minLength": 3, "maxLength": 300}, ["", "ü" * 5, "a" * 290 + "é"]),
        # a class without most multi-byte characters: the chain does not count them
        ({"type": "string", "pattern": "^[a-zé ]{0,25}$"}, ["", "é", "ab é"]),
        # blocks of a long string: the frame of the string's rest may end at every character;
        # its chain runs on through those states (the closing quote is not on it), and the
        # candidates that leave it are checked from the frame below (pda.check_pops)
        (
            {"type": "object", "properties": {"k": {"type": "string", "maxLength": 2000}}},
            [
                '{"k": "',
                '{"k": "' + "w" * (_BLOCK - 2),
                '{"k": "' + "é" * (_BLOCK - 1),
                '{"k": "' + "w" * (_BLOCK + 2),
            ],
        ),
        (
            {"type": "array", "items": {"type": "string", "maxLength": 1500}, "maxItems": 3},
            ['["a", "', '["a", "' + "ö" * 40, '["' + "x" * (_BLOCK - 1)],
        ),
    ],
)
def test_masks_on_counters_of_characters(compiler, schema, prefixes):
    grammar = compiler.compile_json_schema(schema)
    for prefix in prefixes:
        m = grammar.matcher()
        text = (
            prefix if prefix[:1] in "{[" and prefix else json.dumps(prefix, ensure_ascii=False)[:-1]
        )
        assert m.accept_string(text), text
        assert_mask_is_exact(grammar, m.state, text)
    # the masks took that path: token steps of characters, in runs that all fit
    assert any((steps < 0).any() for steps, *_ in compiler.vocab._steps.values())
    assert any((fits[9] <= CHAR_STEPS).any() for *_, fits in compiler.vocab._steps.values())


def test_masks_of_a_pattern_searched_in_a_string_share_the_loop_s_suffix_fates(compiler):
    """Each position of an unanchored pattern is a state of its own leading to one loop (any
    string before the match): the fates of the tokens' suffixes read from that loop are worked
    out once (Machine._fates) and the masks stay exact."""
    grammar = compiler.compile_json_schema({"type": "string", "pattern": "[0-9a-f]{4}-[0-9a-f]{2}"})
    for prefix in ["", "x", "ab", "xab1", "ab12-", "ab12-3", "zz ab12-3f q"]:
        m = grammar.matcher()
        text = json.dumps(prefix)[:-1]
        assert m.accept_string(text), text
        assert_mask_is_exact(grammar, m.state, text)
    kept = grammar.machine._fates
    assert any(fates[-1] == 1 for fates, _ in kept.values())  # worked out, and the words
    # every position allows at once made from them
    assert len(kept) < 4  # and shared by the positions


def test_a_loop_s_words_keep_the_candidates_of_tokens_that_leave_its_frame():
    """The words a loop's later walks start from (lazydfa_walk._loop_words): tokens that close a
    searched-for string and pop out of a nested object (`1"},`, `a"}]`) die after a pop point:
    candidates, kept per first byte; the masks at every position stay exact, also where a byte
    of the loop leads elsewhere (a digit starting the pattern again)."""
    from grammars import GrammarCompiler
    from grammars.tokenizer_info import TokenizerInfo

    words = [b'1"},', b'a"}]', b'ab"},{"', b'f"}', b'q"},', b'x"}],', b"ab1", b"q q", b'q"']
    tokens = [bytes([b]) for b in range(256)] + words + [b"</s>"]
    eos = len(tokens) - 1
    info = TokenizerInfo(tuple(tokens), frozenset({eos}), frozenset({eos}), "byte_level")
    pattern = {"type": "string", "pattern": "[0-9a-f]{4}-[0-9a-f]{2}"}
    node = {"type": "object", "properties": {"kids": {"type": "array"}, "id": pattern}}
    node["properties"]["kids"]["items"] = {"$ref": "#/$defs/node"}
    grammar = GrammarCompiler(info).compile_json_schema(
        {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    )
    for prefix in ["ab12-3f", "ab12-3fq", "ab12-3f q", "q ab12-3f", "ab12-3f1", "ab12-3f ab12"]:
        m = grammar.matcher()
        text = '{"kids": [{"id": ' + json.dumps(prefix)[:-1]
        assert m.accept_string(text), text
        assert_mask_is_exact(grammar, m.state, text)
    words_kept = [loop for fates, loop in grammar.machine._fates.values() if fates[-1] == 1]
    assert any(loop[grammar.vocab.words :].any() for loop in words_kept)  # candidates' bytes


def test_fitting_runs_cut_at_groups_and_at_tokens_that_may_not_fit():
    """vocabulary._fitting_runs: runs of tokens of at most CHAR_STEPS multi-byte characters
    (negative chain steps), within groups, each row with the most characters to its run's end
    and the fewest bytes the rows after it share."""
    from grammars.vocabulary import _FAR, _fitting_runs

    steps = np.array([-2, -3, 0, -1, -(CHAR_STEPS + 1), -4, -1, 5], np.int16)
    lcp = np.array([0, 1, 2, 1, 0, 3, 2, 1], np.int64)
    starts = np.array([1, 0, 0, 0, 0, 1, 0, 0], np.bool_)
    most, fewest, end = _fitting_runs(steps, lcp, starts)
    assert most.tolist() == [3, 3, _FAR, 1, _FAR, 4, 1, _FAR]
    assert fewest.tolist() == [1, _FAR, _FAR, _FAR, _FAR, 2, _FAR, _FAR]
    assert end.tolist() == [2, 2, 3, 4, 5, 7, 7, 8]


def test_chain_steps_of_every_token_with_one_layout_kept(compiler, monkeypatch):
    """vocabulary.chain_steps: a token's bytes when it never leaves the byte set, minus its
    characters when it also holds multi-byte UTF-8 characters (the last one possibly cut
    short), else 0; whatever the layouts kept (one here)."""
    from grammars import vocabulary

    monkeypatch.setattr(vocabulary, "_MAX_CACHED_CHAINS", 1)
    vocab = compiler.vocab
    in_mask = np.zeros(256, np.bool_)
    in_mask[[ord(c) for c in "abcdefghijklmnopqrstuvwxyz _-"]] = True
    by_row, long_rows, _ = vocab.chain_steps(in_mask, 3)
    steps = np.zeros(vocab.size, np.int64)
    steps[vocab.trie.ids] = by_row
    for tid in range(vocab.size):
        data = vocab.token_bytes[tid]
        expected = 0
        if data and tid not in vocab.special_set:
            ascii_in = all(b >= 0x80 or in_mask[b] for b in data)
            if all(in_mask[b] for b in data):
                expected = len(data)
            elif ascii_in and data[0] not in range(0x80, 0xC2):
                try:  # well-formed, the last character possibly cut short
                    data.decode("utf-8")
                    expected = -len(data.decode("utf-8"))
                except UnicodeDecodeError as e:
                    if e.reason == "unexpected end of data":
                        expected = -(len(data[: e.start].decode("utf-8")) + 1)
        assert steps[tid] == expected, (tid, data)
    lengths = [len(vocab.token_bytes[i]) for i in vocab.trie.ids[long_rows].tolist()]
    assert lengths and min(lengths) > 3
    assert len(long_rows) == sum(1 for s in steps.tolist() if s > 3)


_NAMED = {
    "type": "object",
    "properties": {n: {"type": ["integer", "string"]} for n in ("alpha", "beta", "in", "on")},
}
# a string loop most first bytes lead to, and "a" elsewhere: "ab" on to the loop, "ac" dead
_SPLIT = {"type": "string", "pattern": "^(([b-q]|ab)[a-z]*|a[0-9]+)$"}


@pytest.mark.parametrize(
    "schema, prefix",
    [
        (_NAMED, '{"'),
        (_NAMED, '{"alpha": 1, "'),
        (_NAMED, '{"alpha": 1, "beta": "x", "'),
        (_SPLIT, '"'),
    ],
)
def test_masks_at_keys_beside_extra_properties(schema, prefix):
    """Keys of an object that takes extra properties: most first bytes lead to the loop of any
    key, a named key's first byte elsewhere; rows of those that reach the loop later and never
    leave its bytes are allowed without a walk (lazydfa_walk.walk's hub_end), the others (a
    control character, a bad escape, a key closed and followed by a wrong byte) walked. The
    same in a pattern's string, where rows of bytes of the loop die off it."""
    from grammars import GrammarCompiler
    from grammars.tokenizer_info import TokenizerInfo

    # "a" starts a named key, "ax" none: the loop of any key from the second byte on
    words = [b"ax", b"axe", b"axes", b"ax\\n", b"ax\\q", b"ax\n", b"ax\t", b"axe\n"]
    words += [b'ax":', b'ax",', b'ax" :', b"ax\xff", b"ax\xc3\xa9", b"ax\xc3", b"ax\\"]
    words += [b"ab", b"abz", b"ac", b"acd", b"a1", b"a12", b"abz\n", b'ab"', b"a1a", b"abzz"]
    tokens = [bytes([b]) for b in range(256)] + words + [b"</s>"]
    eos = len(tokens) - 1
    info = TokenizerInfo(tuple(tokens), frozenset({eos}), frozenset({eos}), "byte_level")
    grammar = GrammarCompiler(info).compile_json_schema(schema)
    m = grammar.matcher()
    assert m.accept_string(prefix)
    assert_mask_is_exact(grammar, m.state, prefix)
