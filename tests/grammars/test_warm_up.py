import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# in a fresh process: warm_up, then masks over a document that leaves frames with multi-byte
# tokens and crosses a long string's blocks; no kernel may be typed (compiled, or loaded from
# numba's cache) after warm_up
_SCRIPT = r"""
import json, sys
import numpy as np
from numba.core.registry import CPUDispatcher
import grammars
from grammars import GrammarCompiler
from runtime.model.loader import load_tokenizer, resolve_model_path

grammars.warm_up()

def typed():
    out = {}
    for name, module in list(sys.modules.items()):
        if name == "grammars" or name.startswith("grammars."):
            for attr, obj in vars(module).items():
                if isinstance(obj, CPUDispatcher) and obj.__module__ == name:
                    out[f"{name}.{attr}"] = len(obj.overloads)
    return out

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


def test_warm_up_types_every_kernel_a_mask_calls():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("RADIXGEN_NO_JIT", None)  # kernels as numba compiles them
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    late = json.loads(out.stdout.strip().splitlines()[-1])
    assert late == [], f"kernels compiled after warm_up: {late}"
