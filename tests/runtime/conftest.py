"""Models for the runtime tests: the real SmolLM2 and tiny random Llama-family models."""

import os

import pytest
import torch

from runtime.model.loader import copy_tokenizer_files, resolve_model_path


@pytest.fixture
def one_thread():
    # one kernel thread: servers started by other tests may be sharing the two cores
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2_folder() -> str:
    return resolve_model_path("smollm2")


def tokenizer_folder() -> str:
    """SmolLM2's tokenizer files: $RADIXGEN_TOKENIZER_DIR where the GGUF package is not
    installed (a GPU machine, benchmarks/gpu_check.sh), else the smollm2 alias's folder."""
    return os.environ.get("RADIXGEN_TOKENIZER_DIR") or resolve_model_path("smollm2")


def tiny_config(model_type: str, **overrides):
    from transformers import AutoConfig

    base = dict(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        eos_token_id=2,
        bos_token_id=1,
    )
    base.update(overrides)
    return AutoConfig.for_model(model_type, **base)


def make_tiny_model(
    folder: str, smollm2_folder: str, model_type: str, seed: int = 0, **overrides
) -> str:
    """Save a random model of `model_type` with SmolLM2's tokenizer into `folder`."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        tiny_config(model_type, **overrides), dtype=torch.float32
    )
    with torch.no_grad():  # random biases and norms so that every parameter matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
    model.save_pretrained(folder)
    copy_tokenizer_files(smollm2_folder, folder)
    return folder


TINY_VARIANTS = {
    "llama": ("llama", {}),
    "llama-untied-llama3rope": (
        "llama",
        {
            "tie_word_embeddings": False,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
    ),
    "mistral": ("mistral", {"sliding_window": None}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {"head_dim": 32}),
}


@pytest.fixture(scope="session", params=sorted(TINY_VARIANTS))
def tiny_model(request, tmp_path_factory, smollm2_folder) -> str:
    model_type, overrides = TINY_VARIANTS[request.param]
    folder = str(tmp_path_factory.mktemp(request.param))
    return make_tiny_model(folder, smollm2_folder, model_type, **overrides)
