"""MaskBench files (a JSON schema plus valid and invalid instances) and the pass/fail rule.

A file passes when its schema compiles, every valid instance, tokenized from `json.dumps(data)`,
is accepted token by token with EOS allowed at the end, and every invalid one is refused
somewhere (a token or the EOS). benchmarks/bench_grammar.py adds the mask timings.
"""

from __future__ import annotations

import glob
import json
import os

from grammars.errors import GrammarError


def load_files(folder: str) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            out.append((os.path.basename(path), json.load(f)))
    return out


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
