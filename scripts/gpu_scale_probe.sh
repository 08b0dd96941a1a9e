#!/usr/bin/env bash
# The GPU test host's call for serving more per GPU (docs/benchmarks.md, "Under load"): the stub profiled at
# c=16 (client.profile_stub --concurrency 16: ours against the null models), what an instance's memory is
# made of (client.bench_memory), memory and req/s by instance count, with and without CUDA MPS
# (client.bench_instances), and eight models on one GPU (client.bench_many_models). About 9 minutes.
# Usage on the host, from the project root, after .gpu-wheels/device-install.sh:
#   OUT=/tmp/gpu-out bash scripts/gpu_scale_probe.sh        # py-spy's wheel in .whl/ (docs/gpu-host.md)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
make --no-print-directory USE_HOST_PYTHON=1 host-python models || exit 1
command -v py-spy >/dev/null || python3 -m pip install -q --no-index --no-deps .whl/py_spy-*.whl || exit 1
python3 scripts/build_models.py --bench --out bench_repository --models demo mlp4096 > /dev/null || exit 1
mps=$(command -v nvidia-cuda-mps-control >/dev/null && echo --mps)
status=0
python3 -m client.profile_stub --models demo --variants "" _null_kernel _null_host --concurrency 16 \
  --seconds 6 --json "$OUT/profile-c16-demo.json" > "$OUT/profile-c16.log" 2>&1 || status=1
python3 -m client.profile_stub --models mlp4096 --variants "" _null_device --concurrency 16 \
  --seconds 6 --json "$OUT/profile-c16-mlp4096.json" >> "$OUT/profile-c16.log" 2>&1 || status=1
python3 -m client.bench_instances --models demo mlp4096 --counts 1 2 4 $mps \
  --json "$OUT/instances-gpu.json" > "$OUT/instances.log" 2>&1 || status=1
python3 -m client.bench_memory --models demo mlp4096 --json "$OUT/memory-gpu.json" > "$OUT/memory.log" 2>&1 \
  || status=1
python3 -m client.bench_many_models --json "$OUT/many-models-gpu.json" > "$OUT/many-models.log" 2>&1 || status=1
cat "$OUT/profile-c16.log" "$OUT/instances.log" "$OUT/memory.log" "$OUT/many-models.log"
exit $status
