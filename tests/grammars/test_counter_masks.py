"""Masks shared between positions of a length counter or copies of a bounded repetition
(grammars/counter_masks.py): every shared mask is the mask computed for its own state, near
the bounds and far from them, for strings counted whole and in blocks, for counted pattern
classes, strings in arrays, items of arrays with maxItems and repetitions in patterns."""

import json

import numpy as np
import pytest

from grammars import GrammarCompiler
from grammars.json_schema import counted
from grammars.tokenizer_info import TokenizerInfo
from tests.grammars.conftest import assert_mask_is_exact

# every byte, and a few longer tokens: the longest (6 bytes) is the horizon
_TOKENS = [bytes([b]) for b in range(256)] + [
    b"aa",
    b"aaa",
    b"aaaaaa",  # as many characters as bytes: the horizon is exact
    b'a"',
    b'"}',
    b'",',
    b"\\n",
    b"\\u00e9",
    "é".encode(),
    "aé".encode(),
    b"</s>",
]
_EOS = len(_TOKENS) - 1


@pytest.fixture(scope="module")
def small():
    info = TokenizerInfo(tuple(_TOKENS), frozenset({_EOS}), frozenset({_EOS}), "byte_level")
    return GrammarCompiler(info)


def _feed(grammar, token_ids):
    """The states after each prefix of `token_ids` (the empty one first)."""
    m = grammar.matcher()
    states = [m.state]
    for t in token_ids:
        assert m.accept_token(t), t
        states.append(m.state)
    return states


def _ids(data: bytes) -> list[int]:
    return list(data)  # byte tokens only


@pytest.mark.parametrize("lo, hi", [(4, 30), (0, 12), (9, None), (0, 7)])
def test_masks_exact_at_every_count_with_a_small_horizon(small, lo, hi):
    schema = {"type": "string", "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    grammar = small.compile_json_schema(schema)
    assert small.vocab.max_len == 6
    n = hi if hi is not None else lo + 20
    states = _feed(grammar, _ids(b'"' + b"a" * n))
    for i, state in enumerate(states):
        assert_mask_is_exact(grammar, state, i)
    # counts alike for tokens of at most 6 bytes: past lo or as far short of it (beyond 6: all
    # alike), as near hi (beyond 6: all alike); counts past lo without hi are one state
    counts = {min(c, lo) if hi is None else c for c in range(n + 1)}
    far = 1 << 30
    kinds = {
        (
            0 if c >= lo else c - lo if lo - c <= 6 else -far,
            hi - c if hi is not None and hi - c <= 6 else far,
        )
        for c in counts
    }
    assert grammar._counted.shared == len(counts) - len(kinds), (lo, hi)


def test_escapes_and_multibyte_characters_mid_token(small):
    """Counts read inside a character (an escape, UTF-8 bytes) keep their state within it."""
    grammar = small.compile_json_schema({"type": "string", "maxLength": 40})
    text = json.dumps("aé\n" * 6 + "é" * 4, ensure_ascii=False)[:-1].encode()
    ids = []
    for ch in text.decode():  # one token per character, multi-byte ones split in bytes
        ids += list(ch.encode())
    for state in _feed(grammar, ids):
        assert_mask_is_exact(grammar, state)
    assert grammar._counted.shared


def _check_along(grammar, tok, text: str) -> None:
    """The mask of every state along `text`, shared or not, is the mask computed for it alone:
    with nothing shared, neither masks nor frame walks (descriptions put aside, walks kept by
    state in caches of their own)."""
    m = grammar.matcher()
    for t in tok.encode(text, add_special_tokens=False):
        words = grammar.mask(m.state)
        kept = grammar._counted, grammar._walks, grammar._walk_candidates, grammar._walk_bytes
        grammar._counted, grammar._walks, grammar._walk_candidates = None, {}, {}
        try:
            alone = grammar._compute_mask(m.state)
        finally:
            (grammar._counted, grammar._walks, grammar._walk_candidates, grammar._walk_bytes) = kept
        assert np.array_equal(words, alone), text[:40]
        assert m.accept_token(t)


_DOC = 'Zoë said "hi"\n\tthen 日本語 🙂 and \\ more: ' * 20


@pytest.mark.parametrize(
    "schema, text",
    [
        ({"type": "string", "minLength": 100, "maxLength": 300}, json.dumps(_DOC[:290])),
        (
            {"type": "string", "minLength": 100, "maxLength": 300},
            json.dumps(_DOC[:290], ensure_ascii=True),  # escapes, surrogate pairs
        ),
        (  # counted in blocks
            {"type": "object", "properties": {"s": {"type": "string", "maxLength": 5000}}},
            json.dumps({"s": _DOC[: 2 * counted._BLOCK + 40]}),
        ),
        (  # a pattern's class counted in blocks
            {"type": "string", "pattern": "^[a-z ]*$", "maxLength": 3000},
            json.dumps("lorem ipsum dolor sit amet " * 22),
        ),
        (  # one counter read again by every item
            {"type": "array", "items": {"type": "string", "maxLength": 200}},
            json.dumps([_DOC[:150], _DOC[10:170], "x"]),
        ),
    ],
)
def test_shared_masks_are_the_masks_of_their_states(compiler, smollm2_tokenizer, schema, text):
    grammar = compiler.compile_json_schema(schema)
    _check_along(grammar, smollm2_tokenizer, text)
    assert grammar._counted.shared  # masks were shared


def test_no_sharing_without_counters(compiler):
    grammar = compiler.compile_json_schema({"type": "object", "properties": {"a": {}}})
    assert grammar._counted is None


@pytest.mark.parametrize(
    "spec, text",
    [
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 20}, "[" + "1," * 19 + "1]"),
        (
            {"type": "array", "items": {"enum": ["ab", "c"]}, "minItems": 2, "maxItems": 24},
            json.dumps(["ab", "c"] * 12, separators=(",", ":")),
        ),
        ("regex", "(ab|c){0,30}d"),
    ],
)
def test_repetitions_exact_at_every_copy_with_a_small_horizon(small, spec, text):
    """A bounded repetition's copies are alike for tokens that cannot reach its end; masks are
    exact at every byte, and shared between copies far from it."""
    if spec == "regex":
        grammar = small.compile_regex(text)
        text = "abc" * 10 + "d"
    else:
        grammar = small.compile_json_schema(spec)
    assert len(grammar.machine.counter_regions)
    for i, state in enumerate(_feed(grammar, _ids(text.encode()))):
        assert_mask_is_exact(grammar, state, i)
    assert grammar._counted.shared


def test_array_items_share_masks(compiler, smollm2_tokenizer):
    """Items of an array of objects (each item a rule pushed from its copy of the repetition):
    the stacks of items far from maxItems are alike."""
    item = {
        "type": "object",
        "properties": {"key": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["key"],
    }
    schema = {"type": "array", "items": item, "maxItems": 80}
    grammar = compiler.compile_json_schema(schema)
    doc = json.dumps([{"key": f"k{i}", "n": i} for i in range(70)])
    _check_along(grammar, smollm2_tokenizer, doc)
    assert grammar._counted.shared > 100


def test_repetition_of_what_may_be_empty_is_not_described():
    """Copies that may read nothing are not alike for any token length: left out."""
    from grammars.automaton import NFA, lit, opt, rep

    nfa = NFA()
    nfa.build(rep(opt(lit("a")), 0, 20), nfa.new(), nfa.new())
    assert len(nfa.reps) == 1
    from grammars.counter_masks import counter_regions

    assert len(counter_regions([], nfa.reps)) == 0
    nfa = NFA()
    nfa.build(rep(lit("ab"), 0, 20), nfa.new(), nfa.new())
    (row,) = counter_regions([], nfa.reps).tolist()
    assert row[3:6] == [0, 19, 2]  # no lower bound, the last copy, bytes per copy


_BIG = 8 * counted._BLOCK


@pytest.mark.parametrize(
    "spec, text",
    [
        ({"type": "string", "minLength": _BIG + 2, "maxLength": _BIG + 40}, "a" * (_BIG + 30)),
        ({"type": "string", "maxLength": 9000}, "a" * (_BIG + 20)),
        ("(ab|c){12}d", "abcab" * 3 + "cabcd"),
        ("(ab|c){9,12}", "ab" * 11),
        ("x(aaa){10}a{0,5}", "x" + "a" * 35),
        ("(aaaa){10}b", "a" * 40 + "b"),
        ("(aaaa){0,10}b", "a" * 40 + "b"),
        ("(aaaa){10,20}b", "a" * 80 + "b"),
    ],
)
def test_copies_alike_but_those_a_token_reads_past_the_last_from(small, spec, text):
    """A repetition's copies (a long string's blocks, {n} and {m,n} in a pattern) are alike but
    for those from which a token of the horizon's bytes reads past the last copy (from the end
    of copy c, n - c - 1 whole copies, then a byte): masks along the text are those of their
    states, required copies or optional ones."""
    if isinstance(spec, str):
        grammar = small.compile_regex(spec)
    else:
        grammar = small.compile_json_schema(spec)
        text = '"' + text
    assert len(grammar.machine.counter_regions)
    m = grammar.matcher()
    for i, t in enumerate(_ids(text.encode())):
        assert np.array_equal(grammar.mask(m.state), grammar._compute_mask(m.state)), i
        assert m.accept_token(t)
    assert grammar._counted.shared


def test_frames_alike_share_their_walk(small, monkeypatch):
    """Short of minLength each position's set of stacks is a mask of its own (the tail's
    distance to the bound), but the stack of a block counted far from its bounds is a frame
    described alike at every position: its walk is made once and taken by the frames of the
    other positions. Every mask stays exact."""
    grammar = small.compile_json_schema({"type": "string", "minLength": 20, "maxLength": 3000})
    walked, frames = [], set()
    walk, walk_frame = grammar.machine.walk, grammar._walk_frame

    def counting_walk(g, *args):
        walked.append(g)
        return walk(g, *args)

    def seen_frame(g, follow):
        frames.add(g)
        return walk_frame(g, follow)

    monkeypatch.setattr(grammar.machine, "walk", counting_walk)
    monkeypatch.setattr(grammar, "_walk_frame", seen_frame)
    states = _feed(grammar, _ids(b'"' + b"a" * 40))
    for i, state in enumerate(states):
        assert_mask_is_exact(grammar, state, i)
    assert len(walked) < len(frames)  # frames of other states took a walk made before
