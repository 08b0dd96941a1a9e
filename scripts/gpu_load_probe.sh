#!/usr/bin/env bash
# The GPU test host's call for issue 31's load figures (docs/benchmarks.md, "Gathering into the graph's
# buffer"): with nothing else on the GPU, the demo as it ships against the null-kernel floor (the stub
# touching the GPU) and the null-host one (not touching it) at c=1 and c=16 (client.ab, interleaved
# rounds), the same at c=16 with the server and its stubs under CUDA MPS, and the stub profiled at c=16 (client.profile_stub; py-spy from .whl/ when the host lacks it). About 4
# minutes. With `steps`, instead: the demo (as it ships, without graphs, with one ORT pool thread) against
# null-kernel and the null models that add ours' GPU steps one by one (client/bench_null_model.py: own stream,
# concatenation, pinned answer) at c=1 and c=16, and ours, null-kernel and the last step profiled at c=16.
# With `floors`: the demo against null-kernel at c=1 and c=16, the stub profiled at c=16, and beside them
# the in-process anchors of the same run (client.bench_graphs: ours' lone request and null kernel's, with
# and without 1 ms of GPU idle between executes), about 4 minutes.
# With `clock`: the demo (as it ships and without graphs), null-kernel, null-catpin and null-catpin with ours'
# ORT session, each execute() timed inside the stub (the `_timed` variants): client.ab at c=1 and c=16
# (inside execute and outside it, the stubs' garbage collection, ours' binding and ORT's run, per execute),
# then the same with the server and its stubs under CUDA MPS (one GPU context for all), about 5 minutes.
# Usage on the host, from the project root, after .gpu-wheels/device-install.sh:
#   OUT=/tmp/gpu-out bash scripts/gpu_load_probe.sh [steps|floors|clock]
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
make --no-print-directory USE_HOST_PYTHON=1 host-python models > /dev/null || exit 1
python3 scripts/build_models.py --bench --out bench_repository --models demo > /dev/null || exit 1
# py-spy for client.profile_stub, from a wheel carried in .whl/ where the host lacks it (only the modes that
# profile need it: clock has none, and a missing wheel is not an error for it).
if ! command -v py-spy > /dev/null && compgen -G ".whl/py_spy-*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps .whl/py_spy-*.whl
fi
status=0
if [ "${1:-}" = steps ]; then
  python3 -m client.ab --model demo --variants "" _nograph _t1 _null_kernel _null_kstream _null_cat _null_catpin \
    --concurrency 1 16 --rounds 3 --seconds 2 --label steps --json "$OUT/ab-steps-demo.json" || status=1
  python3 -m client.profile_stub --models demo --variants "" _null_kernel _null_catpin --concurrency 16 \
    --seconds 5 --json "$OUT/profile-steps-c16.json" || status=1
  exit $status
fi
if [ "${1:-}" = clock ]; then
  timed=(_timed _nograph_timed _null_kernel_timed _null_catpin_timed _null_catpin_ort_timed)
  python3 -m client.ab --model demo --variants "${timed[@]}" --concurrency 1 16 --rounds 3 --seconds 2 \
    --label clock --json "$OUT/ab-clock-demo.json" || status=1
  if command -v nvidia-cuda-mps-control > /dev/null; then
    python3 -m client.ab --model demo --variants "${timed[@]}" --concurrency 1 16 --rounds 3 --seconds 2 \
      --mps --label clock-mps --json "$OUT/ab-clock-demo-mps.json" || status=1
  fi
  exit $status
fi
if [ "${1:-}" = floors ]; then
  python3 -m client.bench_graphs --executes 1000 --idle-ms 1 --json "$OUT/graphs-idle.json" || status=1
  python3 -m client.bench_graphs --json "$OUT/graphs.json" || status=1
  python3 -m client.ab --model demo --variants "" _null_kernel --concurrency 1 16 --rounds 3 --seconds 2 \
    --label floors --json "$OUT/ab-floors-demo.json" || status=1
  python3 -m client.profile_stub --models demo --variants "" _null_kernel --concurrency 16 --seconds 5 \
    --json "$OUT/profile-floors-c16.json" || status=1
  exit $status
fi
python3 -m client.ab --model demo --variants "" _null_kernel _null_host --concurrency 1 16 --rounds 3 --seconds 2 \
  --label load --json "$OUT/ab-load-demo.json" || status=1
if command -v nvidia-cuda-mps-control > /dev/null; then
  python3 -m client.ab --model demo --variants "" _null_kernel _null_host --concurrency 16 --rounds 3 \
    --seconds 2 --mps --label load-mps --json "$OUT/ab-load-demo-mps.json" || status=1
fi
python3 -m client.profile_stub --models demo --variants "" _null_kernel --concurrency 16 --seconds 5 \
  --json "$OUT/profile-c16.json" || status=1
exit $status
