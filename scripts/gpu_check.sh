#!/usr/bin/env bash
# A GPU host's full run (docs/gpu-host.md): install this project into the host's Python (the one the
# python-backend stub follows), build the models, run every test tier, the smoke check and the benchmark.
# Usage on the host, from the project root, with the GPU stack already in the first python3 on PATH
# (SKIP_BENCH=1 leaves the benchmark out):
#   OUT=/some/dir bash scripts/gpu_check.sh [bench-models...]
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu-info.txt"
python3 -c "import torch, onnxruntime as o, numpy; print('torch', torch.__version__, 'ort', o.__version__, o.get_available_providers(), 'numpy', numpy.__version__)" | tee -a "$OUT/gpu-info.txt"
python3 scripts/build_models.py --out model_repository --models demo
status=0
python3 -m pytest -q -rs tests/unit tests/integration tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" || status=1
python3 -m client.smoke --local 2>&1 | tee "$OUT/smoke.log" || status=1
# -v: one line per test as it finishes, so a run cut short still says which tests failed.
python3 -m pytest -v -rfE tests/reliability -p no:cacheprovider > "$OUT/pytest-reliability.log" 2>&1 || status=1
grep -E "PASSED|FAILED|ERROR|XFAIL|XPASS|passed|failed" "$OUT/pytest-reliability.log" | tail -80
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 scripts/build_models.py --bench --out bench_repository --models ${*:-demo mlp4096} > /dev/null
  python3 -m client.bench --models ${*:-demo mlp4096} --profile --out "$OUT/bench-gpu.json" 2>"$OUT/bench-progress.log" \
    | tee "$OUT/bench.log" || status=1
fi
exit $status
