#!/usr/bin/env bash
# Triton's perf_analyzer, release 2.41 (= Triton 23.12, the dev venv's tritonserver), the load engine of
# `triton-ort perf` and `tune`: the binary from PyPI's tritonclient 2.41.0 wheel, libcudart.so.12 from PyPI's
# nvidia-cuda-runtime-cu12 and libb64.so.0d from Debian's libb64-0d, all in LIB_DIR; BIN_DIR/perf_analyzer is a
# wrapper that runs it with that library path. (PyPI's perf-analyzer 2.60 needs glibc >= 2.38; this binary
# runs on Debian 12's 2.36 and later.) Usage: scripts/install_perf_analyzer.sh PYTHON LIB_DIR BIN_DIR
set -euo pipefail
python=$1 lib_dir=$2 bin_dir=$3
tritonclient=tritonclient==2.41.0
cudart=nvidia-cuda-runtime-cu12==12.3.101
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$lib_dir" "$bin_dir"
"$python" -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d "$scratch" \
  "$tritonclient" "$cudart"
(cd "$scratch" && unzip -q -o tritonclient-*.whl 'tritonclient-*.data/data/bin/perf_analyzer' \
  && unzip -q -o nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12')
install -m 755 "$scratch"/tritonclient-*.data/data/bin/perf_analyzer "$lib_dir/perf_analyzer"
install -m 644 "$scratch"/nvidia/cuda_runtime/lib/libcudart.so.12 "$lib_dir/"
# libb64: Debian's package, unpacked here (no root needed); apt-get download needs Debian's index
if ! ls "$lib_dir"/libb64.so.0d >/dev/null 2>&1; then
  (cd "$scratch" && { apt-get download libb64-0d >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get download libb64-0d >/dev/null; }; } \
    && dpkg-deb -x libb64-0d_*.deb unpacked)
  cp -L "$scratch"/unpacked/usr/lib/x86_64-linux-gnu/libb64.so.0d "$lib_dir/"
fi
cat >"$bin_dir/perf_analyzer" <<EOF
#!/bin/sh
# Triton's perf_analyzer 2.41 with its libraries (scripts/install_perf_analyzer.sh)
LD_LIBRARY_PATH="$(cd "$lib_dir" && pwd)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$(cd "$lib_dir" && pwd)/perf_analyzer" "\$@"
EOF
chmod 755 "$bin_dir/perf_analyzer"
"$bin_dir/perf_analyzer" --version >/dev/null 2>&1 || { echo "perf_analyzer: installed but does not run" >&2; exit 1; }
echo "perf_analyzer: $bin_dir/perf_analyzer"
