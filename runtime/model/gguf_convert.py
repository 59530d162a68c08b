"""Convert a GGUF file (llama.cpp's format) into a Hugging Face model folder.

The folder holds config.json, model.safetensors (dequantized float32), tokenizer.json and
tokenizer_config.json, so every later load goes through the ordinary folder loader.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

# GGUF tensor name (inside "blk.N.") -> Hugging Face name (inside "model.layers.N.").
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_ARCH_TO_MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
# GGUF token types (llama.cpp's llama_token_type).
_TOKEN_CONTROL, _TOKEN_USER_DEFINED = 3, 4
# Pre-tokenizer kinds we can rebuild: GPT-2's regex, optionally after splitting every digit.
_PRE_TOKENIZERS = {"smollm": True, "gpt2": False, "default": False, "starcoder": True}


class GGUFConversionError(ValueError):
    """The GGUF file uses an architecture or tokenizer this converter does not know."""


def convert_gguf_to_hf(gguf_path: str, out_dir: str) -> None:
    """Write a Hugging Face folder for `gguf_path` into `out_dir` (created atomically)."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    fields = {name: _field_value(f) for name, f in reader.fields.items()}
    arch = fields["general.architecture"]
    if arch not in _ARCH_TO_MODEL_TYPE:
        raise GGUFConversionError(f"GGUF architecture {arch!r} is not supported")
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".convert-", dir=parent)
    try:
        config = _hf_config(
            fields, arch, has_output=any(t.name == "output.weight" for t in reader.tensors)
        )
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        _write_weights(reader, config, arch, os.path.join(tmp, "model.safetensors"))
        _write_tokenizer(fields, reader, tmp)
        os.replace(tmp, out_dir) if not os.path.exists(out_dir) else shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("converted %s into %s", gguf_path, out_dir)


def _field_value(field):
    try:
        return field.contents()
    except Exception:  # fields of unusual types are not needed
        return None


def _hf_config(fields: dict, arch: str, has_output: bool) -> dict:
    def get(key, default=None):
        return fields.get(f"{arch}.{key}", default)

    heads = get("attention.head_count")
    hidden = get("embedding_length")
    config = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else f"{arch.title()}ForCausalLM"],
        "model_type": _ARCH_TO_MODEL_TYPE[arch],
        "vocab_size": get("vocab_size") or len(fields["tokenizer.ggml.tokens"]),
        "hidden_size": hidden,
        "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "head_dim": get("attention.key_length") or hidden // heads,
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon", 1e-6),
        "max_position_embeddings": get("context_length", 4096),
        "rope_theta": get("rope.freq_base", 10000.0),
        "tie_word_embeddings": not has_output,
        "bos_token_id": fields.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": fields.get("tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    scaling = get("rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": get("rope.scaling.factor")}
    elif scaling not in (None, "none"):
        raise GGUFConversionError(f"GGUF rope scaling {scaling!r} is not supported")
    return config


def unpermute_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    # llama.cpp interleaves each head's rotary halves; Hugging Face keeps them as two blocks.
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_matrix_types(gguf_path: str) -> list[str]:
    """The tensor type of every matrix in the decoder layers of a GGUF file (Q4_1, F16, ...)."""
    from runtime.model.gguf_index import GGUFIndex

    reader = GGUFIndex(gguf_path)
    return [
        t.tensor_type.name
        for t in reader.tensors
        if t.name.startswith("blk.") and len(t.shape) == 2
    ]


def open_gguf(gguf_path: str):
    """(reader, Hugging Face config, architecture) of a GGUF file, for iter_gguf_weights."""
    from runtime.model.gguf_index import GGUFIndex

    reader = GGUFIndex(gguf_path)  # the tensors and scalar metadata, without the vocabulary
    arch = reader.fields["general.architecture"]
    return reader, _hf_config(reader.fields, arch, has_output=True), arch


@dataclass
class GGUFBlocks:
    """A quantized GGUF matrix left as its raw blocks (a row of blocks per weight row);
    `heads` is set when its rows must be un-permuted like a llama q/k projection."""

    type_name: str
    data: np.ndarray
    rows: int
    cols: int
    heads: int | None


def _write_weights(reader, config: dict, arch: str, path: str) -> None:
    from safetensors.numpy import save_file

    tensors = {name: array for name, array in iter_gguf_weights(reader, config, arch)}
    save_file(tensors, path, metadata={"format": "pt"})


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor; None for one the executor derives itself."""
    if gguf_name.startswith("blk."):
        _, layer, rest = gguf_name.split(".", 2)
        if rest not in _LAYER_TENSORS:
            raise GGUFConversionError(f"unknown GGUF tensor {gguf_name!r}")
        return f"model.layers.{layer}.{_LAYER_TENSORS[rest]}"
    if gguf_name in _TOP_TENSORS:
        return _TOP_TENSORS[gguf_name]
    if gguf_name == "rope_freqs.weight":
        return None  # derived from config (llama3 rope) by the executor
    raise GGUFConversionError(f"unknown GGUF tensor {gguf_name!r}")


def iter_gguf_weights(reader, config: dict, arch: str, keep_types: tuple[str, ...] = ()):
    """Yield (Hugging Face name, weight) for every tensor of a GGUF file: a float32 numpy array,
    or GGUFBlocks for a matrix whose type is in `keep_types`."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        rest = t.name.split(".", 2)[2] if t.name.startswith("blk.") else None
        shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dims fastest-first
        heads = None
        if arch == "llama" and rest == "attn_q.weight":
            heads = config["num_attention_heads"]
        elif arch == "llama" and rest == "attn_k.weight":
            heads = config["num_key_value_heads"]
        if t.tensor_type.name in keep_types and len(shape) == 2:
            yield name, GGUFBlocks(t.tensor_type.name, t.data, *shape, heads)
            continue
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            array = np.asarray(t.data, dtype=np.float32)
        else:
            array = dequantize(t.data, t.tensor_type)
        array = np.ascontiguousarray(array.reshape(shape), dtype=np.float32)
        if heads is not None:
            array = unpermute_rotary(array, heads)
        yield name, np.ascontiguousarray(array)


def _write_tokenizer(fields: dict, reader, out_dir: str) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = fields.get("tokenizer.ggml.model")
    pre = fields.get("tokenizer.ggml.pre") or "default"
    if kind != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise GGUFConversionError(
            f"GGUF tokenizer {kind!r} with pre-tokenizer {pre!r} is not supported "
            "(byte-level BPE with the GPT-2 or SmolLM pre-tokenizer is)"
        )
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _PRE_TOKENIZERS[pre]:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types)
        if ty == _TOKEN_CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, ty in zip(tokens, types)
        if ty == _TOKEN_USER_DEFINED
    ]
    tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)
    tok.save(os.path.join(out_dir, "tokenizer.json"))

    def token_name(key):
        idx = fields.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[idx] if idx is not None and idx < len(tokens) else None

    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token_name("bos"),
        "eos_token": token_name("eos"),
        "unk_token": token_name("unknown"),
        "pad_token": token_name("padding"),
        "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": fields.get(f"{fields['general.architecture']}.context_length", 4096),
    }
    template = fields.get("tokenizer.chat_template")
    if template:
        tok_config["chat_template"] = template
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
