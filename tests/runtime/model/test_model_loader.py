"""The GGUF path (our converter) against transformers' own GGUF reader, and folder loading."""

import json
import os

import pytest
import torch

from runtime.model.loader import (
    ModelNotFoundError,
    alias_gguf_path,
    copy_tokenizer_files,
    iter_safetensors,
    load_tokenizer,
    resolve_model_path,
)


@pytest.fixture(scope="module")
def gguf_path():
    return alias_gguf_path("smollm2")


@pytest.fixture(scope="module")
def hf_gguf_model(gguf_path):
    """SmolLM2 read by transformers' own GGUF loader: an independent reference."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), dtype=torch.float32
    )


def test_gguf_conversion_matches_transformers_gguf_reader(hf_gguf_model, smollm2_folder):
    ref = hf_gguf_model.state_dict()
    ours = dict(iter_safetensors(smollm2_folder))
    assert set(ours) == set(ref) - {"lm_head.weight"}  # tied embeddings
    for name, tensor in ours.items():
        assert torch.equal(tensor, ref[name].float()), name


def test_gguf_tokenizer_matches_transformers(gguf_path, smollm2_folder):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path)
    )
    ours = load_tokenizer(smollm2_folder)
    text = "Hello world 12345 ünïcødé 🤖 <|im_start|>user\nhi<|im_end|>  two\t\ttabs"
    assert ours.encode(text) == ref.encode(text)
    assert ours.decode(ours.encode(text)) == text
    chat = ours.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_conversion_is_cached(smollm2_folder):
    # a second resolve reuses the folder without converting again
    before = os.path.getmtime(os.path.join(smollm2_folder, "model.safetensors"))
    assert resolve_model_path("smollm2") == smollm2_folder
    assert os.path.getmtime(os.path.join(smollm2_folder, "model.safetensors")) == before


def test_gguf_and_hf_folder_load_the_same_engine_weights(tmp_path, smollm2_folder, hf_gguf_model):
    """A folder saved by transformers from the GGUF loads into identical executor weights."""
    from runtime.model.runner import ModelRunner
    from runtime.server_args import ServerArgs

    hf = hf_gguf_model
    from safetensors.torch import save_file

    config = hf.config.to_dict()
    config.pop("quantization_config", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    weights = {k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    save_file(weights, tmp_path / "model.safetensors")
    copy_tokenizer_files(smollm2_folder, str(tmp_path))
    a = ModelRunner(ServerArgs(model_path="smollm2", dtype="float32", max_total_tokens=64)).model
    b = ModelRunner(
        ServerArgs(model_path=str(tmp_path), dtype="float32", max_total_tokens=64)
    ).model
    sb = b.state_dict()
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, sb[name]), name


def test_bad_model_paths(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not an alias"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model_path(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)


def test_gguf_index_reads_what_gguf_reader_reads(gguf_path):
    """GGUFIndex (tensors and scalar metadata, arrays by length) agrees with gguf's reader."""
    import numpy as np
    from gguf import GGUFReader

    from runtime.model.gguf_index import GGUFIndex

    index, reader = GGUFIndex(gguf_path), GGUFReader(gguf_path)
    assert [t.name for t in index.tensors] == [t.name for t in reader.tensors]
    for ours, theirs in zip(index.tensors, reader.tensors):
        assert list(ours.shape) == [int(d) for d in theirs.shape]
        assert ours.tensor_type == theirs.tensor_type
        assert ours.data.dtype == theirs.data.dtype and ours.data.shape == theirs.data.shape
        assert np.array_equal(ours.data[:4], theirs.data[:4])
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):  # the header, not metadata
            continue
        value = field.contents()
        if isinstance(value, list):
            assert len(index.fields[name]) == len(value), name
        else:
            assert index.fields[name] == pytest.approx(value), name
