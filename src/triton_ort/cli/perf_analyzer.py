"""Triton's perf_analyzer, the load engine of `triton-ort perf` and `tune` (docs/benchmarks.md): where it is,
the JSON input data it reads, one measured point from its CSV.

`make perf-analyzer` installs release 2.41 (the dev venv's tritonserver) beside the venv's python: the binary
of PyPI's tritonclient 2.41.0 wheel, with libcudart.so.12 (PyPI) and libb64.so.0d (Debian) in a folder of its
own (scripts/install_perf_analyzer.sh)."""

from __future__ import annotations

import base64
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from triton_ort.cli.args import one_line

ENV = "TRITON_ORT_PERF_ANALYZER"
FIX = f"make perf-analyzer in the triton_ort checkout, or Triton's perf_analyzer on PATH (or in ${ENV})"


@functools.cache
def find_perf_analyzer() -> tuple[str | None, str]:
    """perf_analyzer's path, and "" ; or None and the one line that says why there is none, with the fix.
    Looked for in $TRITON_ORT_PERF_ANALYZER, beside this Python (make perf-analyzer), then on PATH; a
    candidate counts once `perf_analyzer --version` runs (a missing library shows there)."""
    places = [
        os.environ.get(ENV),
        str(Path(sys.executable).parent / "perf_analyzer"),
        shutil.which("perf_analyzer"),
    ]
    failed = []
    for path in dict.fromkeys(p for p in places if p and os.access(p, os.X_OK)):
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            failed.append(f"{path}: {one_line(error)}")
            continue
        if done.returncode == 0:
            return path, ""
        failed.append(f"{path} does not run: {one_line(done.stderr or done.stdout)[:200]}")
    why = "; ".join(failed) or "not found beside this Python nor on PATH"
    return None, f"perf_analyzer, the load engine perf and tune measure with: {why}. Fix: {FIX}"


def _encoded(array: NDArray[Any]) -> dict[str, Any]:
    if array.dtype.kind in "OSU":  # BYTES: the strings as JSON text
        words = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.ravel()]
        return {"content": words, "shape": list(array.shape)}
    raw = np.ascontiguousarray(array).tobytes()
    return {"content": {"b64": base64.b64encode(raw).decode()}, "shape": list(array.shape)}


def input_data(requests: Sequence[Mapping[str, NDArray[Any]]], batched: bool) -> dict[str, Any]:
    """The requests as perf_analyzer's JSON input data: where the model batches, one entry per row ("shape"
    without the batch axis; perf_analyzer fills a batch of -b rows from consecutive entries), else one per
    request; numbers exact, as base64 of their bytes."""
    steps = []
    for request in requests:
        rows = len(next(iter(request.values()))) if batched and request else 1
        for row in range(rows):
            steps.append(
                {name: _encoded(array[row] if batched else array) for name, array in request.items()}
            )
    return {"data": steps}


CSV_STAGES = {
    "queue": "Server Queue",
    "compute_input": "Server Compute Input",
    "compute_infer": "Server Compute Infer",
    "compute_output": "Server Compute Output",
}


def read_csv_row(text: str) -> dict[str, str]:
    """The first point of perf_analyzer's -f CSV (a header and a row per load; the latencies in µs); {}
    where it has none. The lines after a blank one (--verbose-csv's per-window tables) are not read."""
    lines = text.split("\n\n", 1)[0].strip().splitlines()
    if len(lines) < 2:
        return {}
    return dict(zip(lines[0].split(","), lines[1].split(","), strict=False))


def request_count(output: str) -> int:
    """The client's request count perf_analyzer prints for the measured point (0: none printed)."""
    for line in reversed(output.splitlines()):
        if line.strip().startswith("Request count:"):
            return int(line.split(":", 1)[1].split()[0])
    return 0
