#!/usr/bin/env bash
# Where the demo's time at concurrency 1 goes on the GPU test host, in one call (docs/benchmarks.md,
# "What using the GPU in the stub costs"): in-process runs after idle gaps, then the served variants
# interleaved (client.ab): ours, naive, the null models with and without one kernel in the stub, the
# plain zero-copy model.py and each of our library's choices switched on in it alone; then c=16; then,
# where the host has CUDA MPS, the c=1 set again with the server and its stubs as MPS clients (the probe
# of 2026-12-02 ran an earlier version of this script, whose client was an MPS client too).
# Usage on the host, from the project root:  OUT=/tmp/gpu-out bash scripts/gpu_probe.sh
# Writes probe-*.json and smi-clocks.csv into $OUT; the tables are printed.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
make --no-print-directory USE_HOST_PYTHON=1 host-python models >/dev/null || exit 1
python3 scripts/build_models.py --bench --out bench_repository --models demo >/dev/null || exit 1
uname -r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,utilization.gpu --format=csv,noheader -lms 1000 \
  >"$OUT/smi-clocks.csv" 2>&1 &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT
trap 'exit 143' TERM INT

python3 -m client.ab --model demo --idle-probe --seconds 2 --json "$OUT/probe-idle.json"
C1=("" _i1_d0 _graph _naive _null_host _null_kernel _null_kernel_local _plain _plain_own _plain_nosync _plain_pinned _plain_all)
python3 -m client.ab --model demo --variants "${C1[@]}" --rounds 3 --seconds 1.5 --label c1 \
  --json "$OUT/probe-c1.json"
python3 -m client.ab --model demo --variants "" _graph _naive _null_host _null_kernel _plain \
  --concurrency 16 --rounds 2 --seconds 1.5 --label c16 --json "$OUT/probe-c16.json"
python3 -m client.bench_gather --device cuda --requests-per-execute 1 4 16 --calls 1000 \
  --json "$OUT/probe-gather.json" | tail -8

if command -v nvidia-cuda-mps-control >/dev/null; then
  # the server and its stubs as clients of an MPS daemon of that server's own; this client stays outside
  python3 -m client.ab --model demo --variants "" _naive _null_host _null_kernel _plain --mps \
    --rounds 2 --seconds 1.5 --label mps --json "$OUT/probe-mps.json" || echo "the MPS run failed"
else
  echo "no nvidia-cuda-mps-control on this host"
fi
