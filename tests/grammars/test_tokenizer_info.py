"""Token bytes for byte-level BPE (SmolLM2) and SentencePiece byte-fallback vocabularies."""

from grammars.tokenizer_info import TokenizerInfo, byte_level_alphabet


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_byte_level_alphabet_is_a_bijection():
    alphabet = byte_level_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["Ġ"] == ord(" ") and alphabet["Ċ"] == ord("\n") and alphabet["A"] == ord("A")


def test_byte_level_tokens_spell_the_text(smollm2_tokenizer):
    info = TokenizerInfo.from_huggingface(smollm2_tokenizer)
    assert info.kind == "byte_level" and info.vocab_size == 49152
    text = 'Héllo wörld 🤖 {"key": [1, 2.5e-3, null]}\n\t中文 — done'
    ids = smollm2_tokenizer.encode(text)
    assert b"".join(info.token_bytes[t] for t in ids) == text.encode("utf-8")
    pieces = [info.token_bytes[t] for t in smollm2_tokenizer.encode("🤖")]
    assert b"".join(pieces) == "🤖".encode()
    if len(pieces) > 1:  # split into tokens that each hold part of the character
        assert not all(_is_utf8(p) for p in pieces)
    assert 1 in info.special_ids and info.token_bytes[1] == b""  # <|im_start|>
    assert 2 in info.eos_ids


def test_padded_vocabulary_rows_are_special(smollm2_tokenizer):
    info = TokenizerInfo.from_huggingface(smollm2_tokenizer, vocab_size=49160)
    assert info.vocab_size == 49160 and {49152, 49159} <= info.special_ids


def test_sentencepiece_byte_fallback(sentencepiece_tokenizer):
    hf, vocab = sentencepiece_tokenizer
    info = TokenizerInfo.from_huggingface(hf)
    assert info.kind == "sentencepiece"
    assert info.token_bytes[vocab["\u2581a"]] == b" a"
    assert info.token_bytes[vocab["<0xF0>"]] == b"\xf0"
    ids = hf.encode("ab é", add_special_tokens=False)
    assert b"".join(info.token_bytes[t] for t in ids) == " ab é".encode()
    assert 2 in info.eos_ids and 2 in info.special_ids
