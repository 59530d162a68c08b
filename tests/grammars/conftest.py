import json
import os
from pathlib import Path

import numpy as np
import pytest

from grammars import GrammarCompiler


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from runtime.model.loader import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path("smollm2"))


@pytest.fixture(scope="session")
def sentencepiece_tokenizer():
    """A tiny SentencePiece-style vocabulary with byte fallback: (tokenizer, vocab)."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "\u2581a": 4, "b": 5, "a": 6}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=[("\u2581", "a")], unk_token="<unk>", byte_fallback=True)
    )
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    return hf, vocab


@pytest.fixture(scope="session")
def compiler(smollm2_tokenizer):
    return GrammarCompiler(smollm2_tokenizer)


def maskbench_dir() -> Path | None:
    """../shared/data/maskbench-dev next to the checkout (or $RADIXGEN_MASKBENCH)."""
    here = Path(__file__).resolve()
    candidates = [os.environ.get("RADIXGEN_MASKBENCH")]
    candidates += [str(p / "shared" / "data" / "maskbench-dev") for p in here.parents]
    candidates.append("/work/shared/data/maskbench-dev")
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


class Checker:
    """Feeds text token by token, checking the mask agrees with accept_token at every step."""

    def __init__(self, tokenizer, compiler):
        self.tok = tokenizer
        self.compiler = compiler
        self.eos = int(compiler.vocab.eos_ids[0])

    def accepts(self, grammar, text, check_masks: bool = True) -> bool:
        if not isinstance(text, str):
            text = json.dumps(text)
        m = grammar.matcher()
        bitmask = np.zeros(self.compiler.vocab.words, np.int32)
        for tid in self.tok.encode(text, add_special_tokens=False):
            if check_masks:
                m.fill_next_token_bitmask(bitmask)
                in_mask = bool(bitmask[tid >> 5] >> (tid & 31) & 1)
            ok = m.accept_token(tid)
            if check_masks:
                assert ok == in_mask, f"mask and accept_token disagree on {tid} in {text!r}"
            if not ok:
                return False
        return m.accept_token(self.eos)

    def check_schema(self, feature: str, schema: dict, valid: list, invalid: list) -> None:
        """Every valid document accepted to the end, every invalid one refused somewhere."""
        grammar = self.compiler.compile_json_schema(schema)
        for doc in valid:
            assert self.accepts(grammar, json.dumps(doc)), f"{feature}: valid {doc!r} refused"
        for doc in invalid:
            assert not self.accepts(grammar, json.dumps(doc)), f"{feature}: {doc!r} accepted"


@pytest.fixture(scope="session")
def checker(smollm2_tokenizer, compiler):
    return Checker(smollm2_tokenizer, compiler)


def assert_mask_is_exact(grammar, state: int, label=None) -> None:
    """The mask at `state` allows exactly the tokens accept_token takes, over the vocabulary."""
    m = grammar.matcher()
    m._history = [state]
    mask = m.next_token_mask()
    for tid in range(grammar.vocab.size):
        probe = grammar.matcher()
        probe._history = [state]
        assert probe.accept_token(tid) == mask[tid], (label, state, tid)
