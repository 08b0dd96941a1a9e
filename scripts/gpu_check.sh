#!/usr/bin/env bash
# The GPU test host's run (docs/gpu-host.md), in two parts: the tiers that can share the GPU side by side,
# then the memory-sensitive reliability tier alone (its soak judges memory floors, which other tests' load
# beside it would move). The host's Python is used as it is (USE_HOST_PYTHON=1: the first python3 on PATH,
# the one the python-backend stub follows; HOST_PYTHON=/path/to/python3 picks another).
# Usage on the host, from the project root:
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh tiers         # gpu + integration (three parts) + unit at once
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh reliability   # tests/reliability alone (~317 s)
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh bench [models...]   # the smoke check and the benchmark
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh pipelines [args...] # client.bench_pipelines (docs/pipelines.md)
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh lanes         # profile_lanes + inflight_floor (docs/inflight.md)
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh inflight      # in-flight tests, shared-weight lanes, client.bench
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh costs         # GIL per request by step (py-spy on PATH), GPU memory by way
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh perf          # triton-ort perf beside plain perf_analyzer, CUDA shm
#     (perf_analyzer from TRITON_ORT_PERF_ANALYZER or PATH; NATIVE_BACKEND=DIR: also passed to bench and
#     pipelines as --native-backend)
# Logs and summary-<mode>.txt go to $OUT (JUnit XML to a temporary folder); the summary table (tier, passed, failed, errors,
# skipped, seconds) is printed last. Exit status non-zero if any tier failed or did not finish.
set -uo pipefail
MODE=${1:-}
case "$MODE" in
  tiers | reliability | bench | pipelines | lanes | inflight | costs | perf) shift ;;
  *) echo "usage: OUT=DIR bash scripts/gpu_check.sh tiers|reliability|bench [models...]|pipelines [args...]|lanes|inflight|costs|perf" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/gpu-out}
HOST_PYTHON=${HOST_PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# installs this checkout into the host's Python only if it does not import it already; builds the demo
make --no-print-directory USE_HOST_PYTHON=1 HOST_PYTHON="$HOST_PYTHON" host-python models || exit 1
PYTHON=$(command -v "$HOST_PYTHON")
{
  date -u +%Y-%m-%dT%H:%MZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PYTHON" -c "import importlib.metadata as m, torch, onnxruntime as o, numpy; print('nvidia-pytriton', m.version('nvidia-pytriton'), '| torch', torch.__version__, '| onnxruntime', o.__version__, o.get_available_providers(), '| numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/gpu-info-$MODE.txt"

status=0
NATIVE=()
[ -n "${NATIVE_BACKEND:-}" ] && NATIVE=(--native-backend "$NATIVE_BACKEND")
if [ "$MODE" = perf ]; then
  # One server (the demo, two GPU instances), c=16, batch 4, gRPC, CUDA shared memory in and out:
  # perf_analyzer run plainly and `triton-ort perf` (which runs it), interleaved, 3 rounds each
  # (docs/benchmarks.md, "perf and perf_analyzer").
  PA=${TRITON_ORT_PERF_ANALYZER:-$(command -v perf_analyzer)}
  [ -n "$PA" ] || { echo "perf: no perf_analyzer (TRITON_ORT_PERF_ANALYZER=PATH)" >&2; exit 1; }
  "$PYTHON" -m triton_ort.cli serve --model-repository model_repository --http-port 18700 --grpc-port 18701 \
    --metrics-port 18702 > "$OUT/perf-serve.log" 2>&1 &
  serve=$!
  for _ in $(seq 180); do grep -q "tritonserver ready" "$OUT/perf-serve.log" && break; sleep 1; done
  for round in 1 2 3; do
    "$PA" -m demo -u 127.0.0.1:18701 -i grpc -b 4 --concurrency-range 16:16 -p 2000 -s 25 \
      --shared-memory cuda -f "$OUT/perf-analyzer-$round.csv" \
      >> "$OUT/perf-vs-perf-analyzer.log" 2>&1 || status=1
    "$PYTHON" -m triton_ort.cli perf demo -u 127.0.0.1:18701 -i grpc -b 4 --concurrency 16 -p 2000 -s 25 \
      --shared-memory cuda --json "$OUT/triton-ort-perf-$round.json" >> "$OUT/perf-vs-perf-analyzer.log" 2>&1 \
      || status=1
  done
  kill -INT "$serve"; wait "$serve"
  exit $status
fi
if [ "$MODE" = bench ]; then
  "$PYTHON" -m client.smoke --local 2>&1 | tee "$OUT/smoke.log" || status=1
  "$PYTHON" scripts/build_models.py --bench --out bench_repository --models ${*:-demo mlp4096} > /dev/null || exit 1
  mps=$(command -v nvidia-cuda-mps-control >/dev/null && echo --mps)
  # No --profile here (the debug server's per-step timers, about a minute more): `make bench` has them.
  "$PYTHON" -m client.bench --models ${*:-demo mlp4096} $mps --out "$OUT/bench-gpu.json" \
    2>"$OUT/bench-progress.log" | tee "$OUT/bench.log" || status=1
  exit $status
fi
if [ "$MODE" = lanes ]; then
  # ORT's lanes on the GPU (the mlp4096 and the demo, 1, 2 and 4 lanes), the stub's own in-flight floor
  # with the mlp4096's shape per request (300 us of Python, 0.5 ms on the GPU) and with a plain 2 ms wait
  "$PYTHON" scripts/build_models.py --bench --out bench_repository --models demo mlp4096 > /dev/null || exit 1
  for spec in "mlp4096 1024" "demo 100"; do
    read -r model batch <<< "$spec"
    "$PYTHON" -m diagnostics.profile_lanes --onnx "bench_repository/$model/1/model.onnx" --batch "$batch" \
      --lanes 1 2 4 --json "$OUT/lanes-$model.json" 2>&1 | tee -a "$OUT/inflight.log" || status=1
  done
  "$PYTHON" -m diagnostics.inflight_floor --lanes 1 2 4 8 --wait-ms 0.5 --hold-us 300 \
    --json "$OUT/inflight-floor-mlp4096-shape.json" 2>&1 | tee -a "$OUT/inflight.log" || status=1
  "$PYTHON" -m diagnostics.inflight_floor --lanes 1 2 4 8 --wait-ms 2 \
    --json "$OUT/inflight-floor-2ms.json" 2>&1 | tee -a "$OUT/inflight.log" || status=1
  exit $status
fi
if [ "$MODE" = inflight ]; then
  # The in-flight mode's own tests (GPU lanes and their shared weights, a real server in flight), ORT's
  # lanes over one copy of the mlp4096's weights (what each lane's session takes), then the benchmark with
  # the in-flight instances (one instance, 2 and 4 lanes) beside the classic config and the anchors, in
  # one run; no PyTriton or MPS here, to fit the call (about 8 minutes in all)
  "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_inflight_gpu.py \
    tests/unit/test_shared_weights.py tests/integration/test_inflight.py 2>&1 | tee "$OUT/pytest-inflight.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  "$PYTHON" scripts/build_models.py --bench --out bench_repository --models demo mlp4096 > /dev/null || exit 1
  "$PYTHON" -m diagnostics.profile_lanes --onnx bench_repository/mlp4096/1/model.onnx --batch 1024 \
    --lanes 1 4 --seconds 2 --shared-weights --json "$OUT/lanes-shared-mlp4096.json" 2>&1 \
    | tee -a "$OUT/inflight.log" || status=1
  "$PYTHON" -m client.bench --models mlp4096 demo --skip-pytriton "${NATIVE[@]}" --out "$OUT/bench-inflight-gpu.json" \
    2>"$OUT/bench-progress.log" | tee -a "$OUT/inflight.log" || status=1
  exit $status
fi
if [ "$MODE" = costs ]; then
  # Where a request's time goes in a real stub on this host (py-spy --gil, CUDA shared memory, the demo's
  # and the mlp4096's shapes, classic and 4 lanes: GIL-held us per request by step, and the stacks), then
  # what each way of serving holds in GPU memory, one server each, beside the native backend's instances
  # (NATIVE_BACKEND=DIR) (docs/inflight.md)
  "$PYTHON" -m diagnostics.gil_profile --gpu --client-processes 4 --seconds 5 --rate 1000 \
    --raw "$OUT/gil-stacks" --json "$OUT/gil-gpu.json" 2>&1 | tee "$OUT/costs.log" || status=1
  "$PYTHON" scripts/build_models.py --bench --out bench_repository --models demo mlp4096 > /dev/null || exit 1
  "$PYTHON" -m diagnostics.bench_instances --models mlp4096 demo --variants inflight4 i2_d0 native_i4 \
    "${NATIVE[@]}" --seconds 3 --json "$OUT/instances-gpu.json" 2>&1 | tee -a "$OUT/costs.log" || status=1
  exit $status
fi
if [ "$MODE" = pipelines ]; then
  "$PYTHON" -m client.bench_pipelines --out "$OUT/pipelines-gpu.json" "${NATIVE[@]}" "$@" \
    2>"$OUT/pipelines-progress.log" | tee "$OUT/pipelines.log"
  exit "${PIPESTATUS[0]}"
fi

# tier -> its paths and pytest arguments. The multi-GPU file is scripts/gpu_multi_check.sh's. The
# integration files run as three pytest processes (every third file each): as two halves they took 423 s
# and 170 s on the GPU test host on 2026-12-04, near the ten minutes one command may take there.
mapfile -t INTEGRATION < <(ls tests/integration/test_*.py)
PART=("" "" "")
for i in "${!INTEGRATION[@]}"; do PART[i % 3]+=" ${INTEGRATION[$i]}"; done
declare -A ARGS=(
  [gpu]="-q tests/gpu --ignore=tests/gpu/test_multi_gpu.py"
  [integration]="-q${PART[0]}"
  [integration2]="-q${PART[1]}"
  [integration3]="-q${PART[2]}"
  [unit]="-q tests/unit"
  # -v: one line per test as it finishes, so a run cut short still says which tests passed or failed
  [reliability]="-v tests/reliability"
)
if [ "$MODE" = tiers ]; then TIERS=(gpu integration integration2 integration3 unit); else TIERS=(reliability); fi

declare -A PIDS SECONDS_OF
# JUnit XML and timings beside $OUT, not in it: $OUT keeps to the logs and the summary.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$(date +%s)
for tier in "${TIERS[@]}"; do
  rm -f "$WORK/junit-$tier.xml"
  (
    t0=$(date +%s)
    # shellcheck disable=SC2086  # ARGS holds several words on purpose
    "$PYTHON" -m pytest -rfEs -p no:cacheprovider --junitxml="$WORK/junit-$tier.xml" ${ARGS[$tier]} \
      > "$OUT/pytest-$tier.log" 2>&1
    rc=$?
    echo "$(( $(date +%s) - t0 )) $rc" > "$WORK/seconds-$tier.txt"
    exit $rc
  ) &
  PIDS[$tier]=$!
done
for tier in "${TIERS[@]}"; do
  wait "${PIDS[$tier]}" || status=1
  SECONDS_OF[$tier]=$(cat "$WORK/seconds-$tier.txt" 2>/dev/null || echo "? ?")
done

# The table from each tier's JUnit XML; a tier without one (killed, or pytest could not start) says so.
summary="$OUT/summary-$MODE.txt"
{
  echo "gpu_check $MODE: $(head -1 "$OUT/gpu-info-$MODE.txt"), $(( $(date +%s) - started )) s in all"
  sed -n '2,3p' "$OUT/gpu-info-$MODE.txt"
  for tier in "${TIERS[@]}"; do echo "$tier ${SECONDS_OF[$tier]} $WORK/junit-$tier.xml"; done \
    | "$PYTHON" -c '
import sys, xml.etree.ElementTree as ET
rows = []
for line in sys.stdin:
    tier, seconds, rc, path = line.split()
    try:
        suites = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        rows.append([tier, "-", "-", "-", "-", seconds + " (no JUnit XML: see pytest-" + tier + ".log)"])
        continue
    # pytest exit 0: all passed, 1: some failed; anything else (2 interrupted, 3 internal error, 4 usage
    # error, 5 nothing collected) is said beside the numbers, which then do not tell the whole story
    if rc not in ("0", "1"):
        seconds += f" (pytest exit {rc}: see pytest-{tier}.log)"
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    rows.append([tier, passed, n["failures"], n["errors"], n["skipped"], seconds])
header = ["tier", "passed", "failed", "errors", "skipped", "seconds"]
widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
for row in [header, ["-" * w for w in widths], *rows]:
    cells = [str(c).ljust(w) if i in (0, 5) else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
    print("  ".join(cells).rstrip())
'
  # each tier in pytest's own words (its last summary line), for docs/gpu-host.md
  for tier in "${TIERS[@]}"; do
    echo "$tier: $(grep -E '(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$OUT/pytest-$tier.log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
  done
} > "$summary"
for tier in "${TIERS[@]}"; do grep -hE "^(FAILED|ERROR) " "$OUT/pytest-$tier.log"; done | head -40
cat "$summary"
exit $status
