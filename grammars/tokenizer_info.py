"""The real bytes of every token of a Hugging Face tokenizer, computed once per vocabulary.

Byte-level BPE vocabularies (GPT-2 style) spell bytes with printable stand-in characters;
SentencePiece vocabularies with byte fallback spell spaces as "▁" and odd bytes as "<0xNN>".
Both decode here to the exact bytes a token adds to the text, so grammars can work on bytes
(including tokens that hold only part of a UTF-8 character).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPIECE_SPACE = "\u2581"


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's map from stand-in character to byte: printable Latin-1 bytes stand for themselves,
    the other 68 bytes take the characters from U+0100 upwards in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    alphabet = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            alphabet[chr(256 + extra)] = b
            extra += 1
    return alphabet


class UnsupportedTokenizerError(ValueError):
    """The tokenizer's vocabulary kind is neither byte-level BPE nor SentencePiece."""


@dataclass(frozen=True)
class TokenizerInfo:
    """Token id -> bytes, the special ids (never allowed inside a grammar) and the EOS ids."""

    token_bytes: tuple[bytes, ...]
    special_ids: frozenset[int]
    eos_ids: frozenset[int]
    kind: str  # "byte_level" or "sentencepiece"

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    @classmethod
    def from_huggingface(cls, tokenizer, vocab_size: int | None = None) -> TokenizerInfo:
        """Read a transformers tokenizer; `vocab_size` may exceed it (padded model vocabularies)."""
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        vocab: dict[str, int] = tokenizer.get_vocab()
        size = max(vocab_size or 0, max(vocab.values()) + 1)
        kind = _vocabulary_kind(spec, vocab)
        special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        special |= set(getattr(tokenizer, "all_special_ids", []) or [])
        table: list[bytes] = [b""] * size
        alphabet = byte_level_alphabet() if kind == "byte_level" else None
        for text, tid in vocab.items():
            if tid in special:
                continue
            table[tid] = _bytes_of(text, alphabet)
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        # ids past the tokenizer's vocabulary (padding rows of the embedding) are never allowed
        padding = set(range(len(vocab), size)) if len(vocab) < size else set()
        return cls(tuple(table), frozenset(special | padding), frozenset(eos), kind)


def _vocabulary_kind(spec: dict, vocab: dict[str, int]) -> str:
    decoder = json.dumps(spec.get("decoder") or {})
    pre = json.dumps(spec.get("pre_tokenizer") or {})
    if '"ByteLevel"' in decoder or '"ByteLevel"' in pre:
        return "byte_level"
    if "<0x00>" in vocab or "ByteFallback" in decoder or _SPIECE_SPACE in decoder:
        return "sentencepiece"
    raise UnsupportedTokenizerError(
        "only byte-level BPE and SentencePiece (byte fallback) vocabularies are supported"
    )


def _bytes_of(text: str, alphabet: dict[str, int] | None) -> bytes:
    if alphabet is not None:
        try:
            return bytes(alphabet[c] for c in text)
        except KeyError:  # an added, non-special token written in plain text
            return text.encode("utf-8")
    match = _BYTE_TOKEN.match(text)
    if match:
        return bytes([int(match.group(1), 16)])
    return text.replace(_SPIECE_SPACE, " ").encode("utf-8")
