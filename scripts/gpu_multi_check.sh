#!/usr/bin/env bash
# Multi-GPU placement on a host with at least two GPUs (docs/gpu-host.md describes the stack): install this
# project into the host's Python (the one the python-backend stub follows), build the demo, run
# tests/gpu/test_multi_gpu.py (contexts per GPU, nvidia-smi per stub, CUDA-shm copies across GPUs), then
# the 1-vs-2-GPU throughput benchmark. Everything goes to $OUT; non-zero if anything failed.
# Usage on the host, from the project root, with the GPU stack installed in that Python (docs/gpu-host.md):
#   OUT=/some/dir bash scripts/gpu_multi_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-multi-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
"$PYTHON" -m pip install -q --no-deps --no-index --no-build-isolation -e . || exit 1
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  # NVLink or PCIe between the GPUs: what a cross-GPU copy runs over
  nvidia-smi topo -m
  "$PYTHON" -c "import torch, onnxruntime as o; print('torch', torch.__version__, 'ort', o.__version__, o.get_available_providers(), 'GPUs', torch.cuda.device_count())"
} 2>&1 | tee "$OUT/gpu-info.txt"
gpus=$(nvidia-smi -L | grep -c '^GPU ')
if (( gpus < 2 )); then
  echo "gpu_multi_check: this host has $gpus GPU(s); the multi-GPU checks need 2" | tee -a "$OUT/gpu-info.txt"
  exit 2
fi
"$PYTHON" scripts/build_models.py --out model_repository --models demo
status=0
"$PYTHON" -m pytest -v -rs tests/gpu/test_multi_gpu.py -p no:cacheprovider 2>&1 | tee "$OUT/pytest-multi-gpu.log" || status=1
"$PYTHON" -m diagnostics.bench_multi_gpu --json "$OUT/bench-multi-gpu.json" 2>&1 | tee "$OUT/bench-multi-gpu.log" || status=1
echo "gpu_multi_check: exit $status (logs in $OUT)"
exit $status
