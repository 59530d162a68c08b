"""Incremental detokenization: deltas add up to the full text, never split a character, and
never show the start of a stop string."""

import pytest

from runtime.detokenizer.incremental import IncrementalDecoder
from runtime.model.loader import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(smollm2_folder):
    return load_tokenizer(smollm2_folder)


def test_deltas_rebuild_the_text_without_broken_characters(tokenizer):
    text = "héllo 🤖 wörld — ünïcødé 中文字符 and   spaces\nnew line"
    ids = tokenizer.encode(text)
    dec = IncrementalDecoder(tokenizer)
    deltas = [dec.push([t]) for t in ids]
    assert all("\ufffd" not in d for d in deltas)
    deltas.append(dec.push([], {"type": "length", "length": len(ids)}))
    assert "".join(deltas) == text


def test_stop_string_is_held_back_and_trimmed(tokenizer):
    ids = tokenizer.encode("The answer is 42. END of story")
    dec = IncrementalDecoder(tokenizer, stop_strings=["END"])
    shown = "".join(dec.push([t]) for t in ids[:-3])
    assert "EN" not in shown and "END" not in shown
    shown += dec.push(ids[-3:], {"type": "stop", "matched": "END"})
    assert shown == "The answer is 42. "


def test_matched_stop_token_is_trimmed_unless_asked(tokenizer):
    ids = tokenizer.encode("one two three")
    trimmed = IncrementalDecoder(tokenizer)
    trimmed.ids = list(ids)
    assert trimmed.final_text({"type": "stop", "matched": ids[-1]}) == "one two"
    kept = IncrementalDecoder(tokenizer, no_stop_trim=True)
    kept.ids = list(ids)
    assert kept.final_text({"type": "stop", "matched": ids[-1]}) == "one two three"


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_replaced_tail_keeps_the_streamed_text_a_prefix(tokenizer, cut):
    """Jump-forward sends retokenized ids from an earlier offset; the deltas still add up to
    the final text, and nothing shown is taken back."""
    old = tokenizer.encode(" B", add_special_tokens=False)
    final = "Hi there, Bob is héllo here"
    dec = IncrementalDecoder(tokenizer)
    start = tokenizer.encode("Hi there,", add_special_tokens=False)
    shown = "".join(dec.push([t]) for t in start + old)
    new_ids = tokenizer.encode(final, add_special_tokens=False)
    keep = len(start) - cut + 1 if cut > 1 else len(start)
    assert new_ids[:keep] == (start + old)[:keep]
    shown += dec.push(new_ids[keep:], None, keep)
    shown += dec.push([], {"type": "length", "length": len(new_ids)})
    assert shown == final
    assert dec.ids == new_ids
