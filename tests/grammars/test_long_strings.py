"""Strings with long minLength/maxLength (1,024 characters and more; a counter cannot lay out
more than 10,000): counted in blocks, exactly. The block layout is checked exhaustively with small blocks (masks against
accept_token at every token), then at the real sizes."""

import json

import pytest

from grammars import GrammarCompiler, GrammarError
from grammars.json_schema import counted
from tests.grammars.conftest import Checker, assert_mask_is_exact

CHARS = 'aé"\\\n😀z'  # one-byte, two-byte, escaped, four-byte (a surrogate pair escape)


def _text(n: int) -> str:
    return "".join(CHARS[i % len(CHARS)] for i in range(n))


@pytest.fixture(scope="module")
def small_checker(smollm2_tokenizer):
    """A compiler of its own (its cache holds grammars built with small blocks only)."""
    return Checker(smollm2_tokenizer, GrammarCompiler(smollm2_tokenizer))


@pytest.fixture()
def small_blocks(monkeypatch, small_checker):
    """Blocks of 4 characters from 13 characters on."""
    monkeypatch.setattr(counted, "_BLOCK", 4)
    monkeypatch.setattr(counted, "_LONG", 13)
    return small_checker


@pytest.mark.parametrize(
    "lo, hi",
    [(0, 13), (0, 21), (13, None), (14, 19), (5, 30), (17, 17), (26, 41)],
)
def test_every_length_around_the_bounds(small_blocks, lo, hi):
    schema = {"type": "string", "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    grammar = small_blocks.compiler.compile_json_schema(schema)
    top = (hi or lo) + 6
    for n in range(max(0, lo - 3), top + 1):
        expected = lo <= n and (hi is None or n <= hi)
        doc = json.dumps(_text(n))
        # masks (slow here: with 4-character blocks most tokens cross a block's end) once
        masks = n == lo + 5
        assert small_blocks.accepts(grammar, doc, check_masks=masks) == expected, (lo, hi, n)


def test_blocks_inside_objects_and_arrays(small_blocks):
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 15},
            "b": {"type": "array", "items": {"type": "string", "minLength": 13, "maxLength": 14}},
        },
        "required": ["a", "b"],
    }
    grammar = small_blocks.compiler.compile_json_schema(schema)
    ok = {"a": _text(15), "b": [_text(13), _text(14)]}
    assert small_blocks.accepts(grammar, json.dumps(ok))
    for bad in (
        {"a": _text(16), "b": []},
        {"a": "", "b": [_text(12)]},
        {"a": "", "b": [_text(15)]},
    ):
        assert not small_blocks.accepts(grammar, json.dumps(bad), check_masks=False), bad


def test_real_sizes(checker, compiler):
    """maxLength 32767 (the commonest long bound in MaskBench) and a minLength of 20,000."""
    short = compiler.compile_json_schema({"type": "string", "maxLength": 32767})
    for n in (0, counted._BLOCK + 1):  # masks checked across the first block's end
        assert checker.accepts(short, json.dumps(_text(n)))
    assert checker.accepts(short, json.dumps("x" * 32767), check_masks=False)
    assert not checker.accepts(short, json.dumps("x" * 32768), check_masks=False)
    long = compiler.compile_json_schema({"type": "string", "minLength": 20_000})
    assert not checker.accepts(long, json.dumps("y" * 19_999), check_masks=False)
    assert checker.accepts(long, json.dumps("y" * 20_000 + "é"), check_masks=False)


def test_long_bound_beside_a_pattern_of_one_run(checker):
    grammar = checker.compiler.compile_json_schema(
        {"type": "string", "pattern": "^a+$", "maxLength": 20_000}
    )
    assert checker.accepts(grammar, json.dumps("a" * 20_000), check_masks=False)
    for wrong in ("a" * 20_001, "", "a" * 50 + "b"):
        assert not checker.accepts(grammar, json.dumps(wrong), check_masks=False)


def test_masks_across_block_ends_hold_every_token_accept_token_takes(small_blocks):
    """Near a block's end most tokens cross it: the candidates checked in compiled code
    (grammars.pda.check_rows) must give the mask accept_token gives, token by token, over the
    whole vocabulary."""
    grammar = small_blocks.compiler.compile_json_schema(
        {"type": "string", "minLength": 13, "maxLength": 30}
    )
    states = []
    for n in (0, 3, 4, 7, 12):  # characters written so far
        m = grammar.matcher()
        for tid in small_blocks.tok.encode(json.dumps(_text(n))[:-1], add_special_tokens=False):
            assert m.accept_token(tid)
        states.append(m.state)
    for state in states:
        assert_mask_is_exact(grammar, state)


def _run(n: int, head: str = "ab", tail: str = "c", chars: str = "xy") -> str:
    middle = n - len(head) - len(tail)
    return head + "".join(chars[i % len(chars)] for i in range(middle)) + tail


def test_a_long_length_beside_a_pattern_of_one_run(checker):
    """^ab[xy]*c$ beside lengths too long to unroll into the pattern's automaton: the run of
    [xy] is counted in blocks, for each length of the parts around it."""
    schema = {"type": "string", "pattern": "^ab[xy]*c$", "minLength": 550, "maxLength": 1030}
    grammar = checker.compiler.compile_json_schema(schema)
    for n in (549, 550, 551, 1029, 1030, 1031):
        assert checker.accepts(grammar, json.dumps(_run(n)), check_masks=n == 551) == (
            550 <= n <= 1030
        ), n
    for wrong in ("ab" + "x" * 600 + "z" + "c", "ab" + "x" * 600, "a" + "x" * 600 + "c"):
        assert not checker.accepts(grammar, json.dumps(wrong), check_masks=False)


def test_a_long_length_beside_a_pattern_whose_head_varies(checker):
    schema = {"type": "string", "pattern": "^https?://.+$", "maxLength": 1024}
    grammar = checker.compiler.compile_json_schema(schema)
    for head in ("http://", "https://"):
        for n in (len(head), len(head) + 1, 1024, 1025):
            text = _run(n, head, "", "é/")
            expected = len(head) < n <= 1024
            assert checker.accepts(grammar, json.dumps(text), check_masks=False) == expected


def test_a_long_length_beside_a_pattern_of_two_runs_raises(compiler):
    with pytest.raises(GrammarError, match="maxLength"):
        compiler.compile_json_schema(
            {"type": "string", "pattern": "^[a-z]+\\.[a-z]+$", "maxLength": 1024}
        )


def test_a_long_length_beside_a_pattern_every_string_matches(checker):
    schema = {"type": "string", "pattern": "([0-9a-z]+)?", "maxLength": 4096}
    grammar = checker.compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, json.dumps("é-" * 2048), check_masks=False)
    assert not checker.accepts(grammar, json.dumps("é-" * 2048 + "x"), check_masks=False)


def _short_token_compiler() -> GrammarCompiler:
    """A vocabulary whose longest token has 3 bytes (every byte, and every 2- and 3-byte string
    over a few characters that strings and their ends are made of), so that blocks of 4
    characters are longer than any token: the stacks below such blocks then read every token
    alike (grammars/horizon.py) and the checks of the tokens crossing a block's end are shared
    between blocks."""
    import itertools

    from grammars.tokenizer_info import TokenizerInfo

    alphabet = [b"a", b'"', b"\\", b"n", b" ", b"}", b",", b"\xc3", b"\xa9"]
    tokens = [bytes([b]) for b in range(256)]
    for n in (2, 3):
        tokens += [b"".join(p) for p in itertools.product(alphabet, repeat=n)]
    tokens.append(b"")  # EOS
    info = TokenizerInfo(
        tuple(tokens), frozenset({len(tokens) - 1}), frozenset({len(tokens) - 1}), "byte_level"
    )
    return GrammarCompiler(info)


@pytest.mark.parametrize("block", [4, 1])
@pytest.mark.parametrize("lo, hi", [(0, 21), (13, None), (5, 30), (26, 41)])
def test_shared_checks_across_blocks_keep_every_mask_exact(monkeypatch, lo, hi, block):
    """Masks at every position of strings of several blocks (inside an object, where a token
    may also close the string and go on) allow exactly what accept_token takes: with blocks
    longer than every token (4 bytes at least, tokens 3) the checks are shared between blocks;
    with shorter ones (1) a token may read past a whole block into the state after it (the
    last block's differs), and they must not be."""
    monkeypatch.setattr(counted, "_BLOCK", block)
    monkeypatch.setattr(counted, "_LONG", 13)
    compiler = _short_token_compiler()
    inner = {"type": "string", "minLength": lo}
    if hi is not None:
        inner["maxLength"] = hi
    schema = {"type": "object", "properties": {"s": inner, "t": {"type": "integer"}}}
    grammar = compiler.compile_json_schema(schema, any_whitespace=False)
    vocab = compiler.vocab
    assert vocab.max_len == 3
    index = {t: i for i, t in enumerate(vocab.token_bytes)}
    for n in sorted({lo, lo + 5, (hi or lo + 9) - 1, hi or lo + 9}):
        if n < 0:
            continue
        doc = json.dumps({"s": _short_text(n), "t": 1}, ensure_ascii=False)
        data = doc.encode()
        m = grammar.matcher()
        at = 0
        while at < len(data):  # greedy tokens of up to 3 bytes
            piece = data[at : at + 3] if data[at : at + 3] in index else data[at : at + 1]
            assert_mask_is_exact(grammar, m.state, (lo, hi, n, at))
            assert m.accept_token(index[piece]), (lo, hi, n, at)
            at += len(piece)
        assert m.accept_token(len(vocab.token_bytes) - 1)
    behaviours = list(grammar._shared_checks.behaviours.values())
    if block == 4:  # stacks below blocks read tokens alike
        assert len(set(behaviours)) < len(behaviours)


def _short_text(n: int) -> str:
    """n characters of a, é, a newline (escaped: 2 bytes) and a quote (escaped)."""
    return "".join('aé\n"'[i % 4] for i in range(n))
