"""Jump-forward on a real tokenizer and real grammars (no model): the forced text is appended,
the tail is retokenized, the matcher follows, and the text is exactly old text + forced text."""

import os

import pytest

from runtime.sampling.params import SamplingParams
from runtime.scheduler.jump_forward import jump_forward
from runtime.scheduler.req import Req

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tokenizer():
    from runtime.model.loader import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path("smollm2"))


@pytest.fixture(scope="module")
def compiler(tokenizer):
    from grammars import GrammarCompiler

    return GrammarCompiler(tokenizer)


def _req(grammar, tokenizer, text: str) -> Req:
    """A request whose output so far is `text`, accepted by its matcher."""
    req = Req("r", [1, 2, 3], SamplingParams(max_new_tokens=100))
    req.grammar = grammar.matcher()
    for tid in tokenizer.encode(text, add_special_tokens=False) if text else []:
        assert req.grammar.accept_token(tid)
        req.output_ids.append(tid)
    return req


def _text(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=False)


def test_a_decided_choice_completes_at_once(compiler, tokenizer):
    grammar = compiler.compile_choices(["apple pie with cream", "banana split"])
    req = _req(grammar, tokenizer, "ban")
    jump = jump_forward(req, tokenizer, 100)
    assert jump is not None and jump.added > 0
    assert _text(tokenizer, req.output_ids) == "banana split"
    assert req.grammar.is_completed()
    assert jump_forward(req, tokenizer, 100) is None  # nothing more is forced


def test_retokenization_replaces_the_last_token(compiler, tokenizer):
    grammar = compiler.compile_regex(r" Bob is here")
    req = _req(grammar, tokenizer, " B")
    old_last = req.output_ids[-1]
    jump = jump_forward(req, tokenizer, 100)
    assert jump is not None
    assert jump.keep == 0  # " B" + "ob" is one token " Bob": the old token is replaced
    assert req.output_ids[0] != old_last
    assert req.output_ids == tokenizer.encode(" Bob is here", add_special_tokens=False)
    assert req.grammar.is_completed()


def test_the_opening_of_a_schema_is_forced_before_any_token(compiler, tokenizer):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    }
    grammar = compiler.compile_json_schema(schema, any_whitespace=False)
    req = _req(grammar, tokenizer, "")
    jump = jump_forward(req, tokenizer, 100)
    assert jump is not None and jump.keep == 0
    text = _text(tokenizer, req.output_ids)
    # all but the last token of the forced text: that one may merge with what the model writes
    opening = '{"name": "'
    assert text and opening.startswith(text) and text != opening
    # the matcher accepted exactly those tokens: the rest of a document still fits
    assert req.grammar.accept_string(opening[len(text) :] + 'Ann"}')
    assert req.grammar.is_completed()


def test_a_jump_stops_at_the_output_limit(compiler, tokenizer):
    grammar = compiler.compile_regex(r"one two three four five six seven")
    req = _req(grammar, tokenizer, "one")
    jump = jump_forward(req, tokenizer, 3)
    assert jump is not None and len(req.output_ids) == 3
    assert _text(tokenizer, req.output_ids) == "one two three"
    assert req.grammar.accept_string(" four five six seven")


def test_nothing_forced_means_no_jump(compiler, tokenizer):
    grammar = compiler.compile_regex(r"[a-z]+")
    req = _req(grammar, tokenizer, "abc")
    before = list(req.output_ids)
    assert jump_forward(req, tokenizer, 100) is None
    assert req.output_ids == before


def test_text_after_a_jump_is_old_text_plus_forced_text_across_unicode(compiler, tokenizer):
    grammar = compiler.compile_regex(r"héllo wörld — 日本語 done")
    for prefix in ("h", "hé", "héllo w", "héllo wörld — 日"):
        req = _req(grammar, tokenizer, prefix)
        forced = req.grammar.find_jump_forward_string()
        old = _text(tokenizer, req.output_ids)
        jump = jump_forward(req, tokenizer, 100)
        assert jump is not None
        assert _text(tokenizer, req.output_ids) == old + forced == "héllo wörld — 日本語 done"
        assert req.grammar.is_completed()
