#!/usr/bin/env bash
# The GPU test host's call for the demo's CUDA graphs per bucket of batch sizes (docs/benchmarks.md,
# "CUDA graphs per bucket"): tests/gpu first (the graph tests among them), then, with nothing else on the GPU,
# the demo as it ships (graphs) against itself without graphs and the null-kernel floor at c=1 and c=16
# (client.ab, interleaved rounds), mlp4096's in-process runs (the GPU's own limit) beside it and
# null-device at c=16, and the demo's memory per instance after a c=16 load (client.bench_instances).
# About 7 minutes. Usage on the host, from the project root, after .gpu-wheels/device-install.sh:
#   OUT=/tmp/gpu-out bash scripts/gpu_graph_probe.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
make --no-print-directory USE_HOST_PYTHON=1 host-python models > /dev/null || exit 1
python3 scripts/build_models.py --bench --out bench_repository --models demo mlp4096 > /dev/null || exit 1
status=0
python3 -m pytest -q -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_multi_gpu.py > "$OUT/gpu-tests.log" 2>&1 \
  || status=1
tail -15 "$OUT/gpu-tests.log"
python3 -m client.ab --model demo --variants "" _nograph _null_kernel --concurrency 1 16 --rounds 3 \
  --seconds 2 --label graphs --json "$OUT/ab-graphs-demo.json" || status=1
python3 -m client.ab --model mlp4096 --idle-probe --json "$OUT/idle-mlp4096.json" || status=1
python3 -m client.ab --model mlp4096 --variants "" _null_device --concurrency 16 --rounds 2 --seconds 2 \
  --label mlp4096 --json "$OUT/ab-mlp4096.json" || status=1
python3 -m client.bench_instances --models demo --counts 2 --json "$OUT/instances-graphs.json" || status=1
exit $status
