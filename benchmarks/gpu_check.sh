#!/usr/bin/env bash
# GPU check for a machine with a CUDA GPU (under 8 minutes): the kernel tests on the GPU, then
# kernel and whole-Engine timings, ending with one JSON line.
#   bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export HF_HUB_OFFLINE=1
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name())"
timeout 240 $PY -m pytest -q -x tests/kernels
timeout 300 $PY benchmarks/gpu_check.py
