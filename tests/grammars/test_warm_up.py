import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# in a fresh process: warm_up, then masks over a document that leaves frames with multi-byte
# tokens and crosses a long string's blocks; no kernel may be typed (compiled, or loaded from
# numba's cache) after warm_up
_TYPED = r"""
import json, sys
import numpy as np
from numba.core.registry import CPUDispatcher
import grammars

def typed():
    out = {}
    for name, module in list(sys.modules.items()):
        if name == "grammars" or name.startswith("grammars."):
            for attr, obj in vars(module).items():
                if isinstance(obj, CPUDispatcher) and obj.__module__ == name:
                    out[f"{name}.{attr}"] = len(obj.overloads)
    return out
"""

_SCRIPT = (
    _TYPED
    + r"""
from grammars import GrammarCompiler
from runtime.model.loader import load_tokenizer, resolve_model_path

grammars.warm_up()
before = typed()
tok = load_tokenizer(resolve_model_path("smollm2"))
schema = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}},
        "note": {"type": "string", "maxLength": 3000},
        "any": {},
    },
    "required": ["items"],
}
doc = {"items": [{"id": i, "tags": ["a", "bc"]} for i in range(30)], "note": "word " * 300,
       "any": [{"x": [1, {"y": "z"}]}]}
grammar = GrammarCompiler(tok).compile_json_schema(schema)
matcher = grammar.matcher()
for t in tok.encode(json.dumps(doc), add_special_tokens=False):
    matcher.next_token_mask()
    assert matcher.accept_token(t)
after = typed()
assert sum(before.values()) > 0, "no kernel typed by warm_up: are the kernels compiled?"
print(json.dumps(sorted(k for k, n in after.items() if n > before.get(k, 0))))
"""
)


# the compile process's start (warm_up_builds), then a machine built and sent (pickled)
_BUILDS_SCRIPT = (
    _TYPED
    + r"""
import pickle
from grammars.compiler import build_machine, warm_up_builds

warm_up_builds()
before = typed()
schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}},
          "b": {"type": "string", "maxLength": 40}, "c": {"enum": [1, "x"]}}}
pickle.dumps(build_machine("json_schema", schema))
after = typed()
print(json.dumps(sorted(k for k, n in after.items() if n > before.get(k, 0))))
"""
)

# kernels as plain Python: a grammar compiles and its masks agree with accept_token
_NO_JIT_SCRIPT = r"""
import numpy as np
from grammars import GrammarCompiler
from grammars.tokenizer_info import TokenizerInfo

tokens = tuple(bytes([b]) for b in range(256)) + (b'{"', b'": "', b'ab', b'"}', b"")
info = TokenizerInfo(tokens, frozenset({len(tokens) - 1}), frozenset({len(tokens) - 1}),
                     "byte_level")
grammar = GrammarCompiler(info).compile_json_schema(
    {"type": "object", "properties": {"k": {"type": "string", "maxLength": 4}}})
matcher = grammar.matcher()
for t in [256, ord("k"), 257, 258, ord("c"), 259]:  # {"k": "abc"}
    mask = matcher.next_token_mask()
    assert mask[t] and matcher.accept_token(t), t
assert matcher.next_token_mask()[len(tokens) - 1]
print("ok")
"""


def _run(script: str, **env_changes) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), **env_changes)
    if "RADIXGEN_NO_JIT" not in env_changes:
        env.pop("RADIXGEN_NO_JIT", None)  # kernels as numba compiles them
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_warm_up_types_every_kernel_a_mask_calls():
    late = json.loads(_run(_SCRIPT))
    assert late == [], f"kernels compiled after warm_up: {late}"


def test_warm_up_builds_types_every_kernel_a_build_and_its_sending_call():
    late = json.loads(_run(_BUILDS_SCRIPT))
    assert late == [], f"kernels compiled after warm_up_builds: {late}"


def test_kernels_run_as_python_without_numba_compiling_them():
    assert _run(_NO_JIT_SCRIPT, RADIXGEN_NO_JIT="1") == "ok"
