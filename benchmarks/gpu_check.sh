#!/usr/bin/env bash
# The GPU check, on a CUDA machine, in under 6 minutes: the kernel and CUDA-graph tests on the
# GPU, then benchmarks/gpu_check.py (kernel GB/s and TFLOP/s, Engine decode with and without
# CUDA graphs against transformers, prefix reuse, a constrained batch), ending with one JSON
# line. On a bare GPU machine, first run benchmarks/gpu_prepare.sh where pip works and bring
# .whl/ along: its wheels are installed here and its tokenizer used.
#   bash benchmarks/gpu_check.sh
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
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/kernels tests/runtime/model/test_cuda_graph.py || echo "gpu tests failed"
timeout 300 $PY benchmarks/gpu_check.py --tokenizer "${RADIXGEN_TOKENIZER_DIR:-}"
