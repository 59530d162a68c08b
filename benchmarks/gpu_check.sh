#!/usr/bin/env bash
# The GPU check, on a CUDA machine, in under 6 minutes: the kernel and CUDA-graph tests on the
# GPU, then benchmarks/gpu_check.py (kernel GB/s and TFLOP/s, Engine decode with and without
# CUDA graphs against transformers, prefix reuse, a constrained batch), ending with one JSON
# line. On a bare GPU machine, first run benchmarks/gpu_prepare.sh where pip works and bring
# .whl/ along: its wheels are installed here and its tokenizer used.
#   bash benchmarks/gpu_check.sh [gpu_check.py options: --skip, --extra]
# GPU_CHECK_LOGS=DIR keeps the test logs there; GPU_CHECK_GRID_S: seconds for the kernel grid
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/radixgen-site .whl/*.whl
  export PYTHONPATH=/tmp/radixgen-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d .whl/smollm2-tokenizer ]; then
  export RADIXGEN_TOKENIZER_DIR=$PWD/.whl/smollm2-tokenizer
fi
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name())"
# the grammar kernels' one-time build (a minute or more on a fresh machine) beside the tests,
# so that the constrained batch finds them built
$PY -c "import grammars; grammars.warm_up()" >"${GPU_CHECK_LOGS:-/tmp}/grammar-warm-up.log" 2>&1 &
# the tests written for the GPU first, then the kernel grid at head_dim 64 and 128 (each case
# compiles its own kernels); each run's last line goes into the JSON line
LOGS=${GPU_CHECK_LOGS:-/tmp}
run_tests() {  # the run's end to stderr, its last line (the counts) to stdout
  local log=$LOGS/$1.log limit=$2
  shift 2
  timeout "$limit" $PY -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1 || true
  tail -25 "$log" >&2
  tail -1 "$log"
}
first=$(run_tests gpu-tests 120 tests/runtime/model/test_cuda_graph.py tests/kernels \
  -k "graph or fp8 or long or fill or whole_model or bitmask or fused")
grid=skipped  # GPU_CHECK_GRID_S=0 leaves the grid out
if [ "${GPU_CHECK_GRID_S:-75}" != 0 ]; then
  grid=$(run_tests gpu-grid "${GPU_CHECK_GRID_S:-75}" tests/kernels -k "reference and (-64- or -128-)")
fi
timeout 270 $PY benchmarks/gpu_check.py --tokenizer "${RADIXGEN_TOKENIZER_DIR:-}" "$@" \
  --tests "graph, fp8 and whole-model tests: $first; kernel grid: $grid"
