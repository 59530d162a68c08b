"""The MaskBench protocol over a folder of files (a schema plus valid and invalid instances).

For each file: compile the schema; for each instance, tokenize `json.dumps(data)` and, token by
token, fill the mask, check the token is in it, and commit it; a valid instance must be accepted
to the end with EOS then allowed, an invalid one must be refused somewhere (a token or the EOS).
"""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from grammars.errors import GrammarError


@dataclass
class FileResult:
    name: str
    status: str  # "pass", "compile_error", "validation_error", "invalidation_error"
    compile_s: float = 0.0
    mask_s: list[float] = field(default_factory=list)
    detail: str = ""


def load_files(folder: str) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            out.append((os.path.basename(path), json.load(f)))
    return out


def run_file(compiler, tokenizer, name: str, spec: dict) -> FileResult:
    """Run one file through radixgen's GrammarCompiler."""
    vocab = compiler.vocab
    eos = int(vocab.eos_ids[0])
    t0 = time.perf_counter()
    try:
        grammar = compiler.compile_json_schema(spec["schema"])
        matcher = grammar.matcher()
        bitmask = np.zeros(vocab.words, np.int32)
        matcher.fill_next_token_bitmask(bitmask)
    except GrammarError as exc:
        return FileResult(name, "compile_error", time.perf_counter() - t0, detail=str(exc))
    result = FileResult(name, "pass", time.perf_counter() - t0)
    for test in spec["tests"]:
        ids = tokenizer.encode(json.dumps(test["data"]), add_special_tokens=False)
        matcher = grammar.matcher()
        accepted = True
        for tid in ids:
            t = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            result.mask_s.append(time.perf_counter() - t)
            in_mask = bool(bitmask[tid >> 5] >> (tid & 31) & 1)
            ok = matcher.accept_token(tid)
            if ok != in_mask:
                raise AssertionError(f"{name}: mask and accept_token disagree on token {tid}")
            if not ok:
                accepted = False
                break
        if accepted:
            matcher.fill_next_token_bitmask(bitmask)
            accepted = bool(bitmask[eos >> 5] >> (eos & 31) & 1)
        if accepted != test["valid"]:
            kind = "invalidation_error" if accepted else "validation_error"
            if result.status != "invalidation_error":
                result.status = kind
                result.detail = json.dumps(test["data"])[:200]
    return result


def check_file(compiler, tokenizer, spec: dict) -> str:
    """The file's status without timing masks: compile, then commit every instance's tokens."""
    try:
        grammar = compiler.compile_json_schema(spec["schema"])
    except GrammarError:
        return "compile_error"
    except Exception as exc:  # noqa: BLE001 - reported, never hidden
        return f"crash: {type(exc).__name__}: {exc}"[:200]
    status = "pass"
    for test in spec["tests"]:
        matcher = grammar.matcher()
        ids = tokenizer.encode(json.dumps(test["data"]), add_special_tokens=False)
        accepted = all(matcher.accept_token(t) for t in ids) and matcher.is_completed()
        if accepted != test["valid"]:
            kind = "invalidation_error" if accepted else "validation_error"
            if status != "invalidation_error":
                status = kind
    return status
