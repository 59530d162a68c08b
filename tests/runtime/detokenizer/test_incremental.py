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
