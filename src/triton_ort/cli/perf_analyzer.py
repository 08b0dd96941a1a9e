"""Triton's perf_analyzer, the load engine of `triton-ort perf` and `tune` (docs/benchmarks.md): where it is,
the JSON input data it reads, its command for one point and the point from its CSV, and the options perf
and tune share (perf_analyzer's, of the same names).

`make perf-analyzer` installs release 2.41 (the dev venv's tritonserver) beside the venv's python: the binary
of PyPI's tritonclient 2.41.0 wheel, with libcudart.so.12 (PyPI) and libb64.so.0d (Debian) in a folder of its
own (scripts/install_perf_analyzer.sh)."""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from triton_ort.cli.args import one_line, positive
from triton_ort.cli.request_checks import OutputSpec
from triton_ort.cli.request_data import add_request_data_options

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


# --- one point -------------------------------------------------------------------------------------------

UNSETTLED_WINDOWS = 3
"""A point perf_analyzer could not settle is measured again over this many windows (any spread passes)."""


class PerfError(RuntimeError):
    """A run that could not go on: no perf_analyzer, a refused request, a wrong answer; one line."""


@dataclass(frozen=True)
class Target:
    """A served model and what its answers must look like."""

    name: str
    expected: list[OutputSpec]
    left_out: tuple[str, ...] = ()
    """The optional inputs the data leaves out (the model's defaults apply)."""


@dataclass
class Point:
    """One model at one load, as perf_analyzer measured it (latencies in µs)."""

    model: str
    concurrency: int
    batch: int
    requests: int
    infer_per_s: float
    avg_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    stable: bool = True
    server_us: dict[str, float] = field(default_factory=dict)
    """Triton's stages (STAGES), mean µs per request over the measured windows."""
    percentile: float | None = None
    """--percentile: the latency the run judges stability, the threshold and rankings by (None: the mean)."""
    latency_us: float = 0.0
    """That latency: avg_us, or the percentile's."""
    request_rate: float | None = None
    """--request-rate: the rate the requests were sent at (open loop)."""
    gpu_utilization: float | None = None
    """The server's GPU utilisation (0-1, perf_analyzer's --collect-metrics); None: no GPU metrics."""
    gpu_memory_mib: float | None = None

    @property
    def requests_per_s(self) -> float:
        return self.infer_per_s / self.batch if self.batch else 0.0

    @property
    def load(self) -> str:
        """The point's load: c=N (closed loop), or r=R (requests per second)."""
        return f"r={self.request_rate:g}" if self.request_rate is not None else f"c={self.concurrency}"


def per_gpu(row: Mapping[str, str], key: str, combine: Callable[[list[float]], float]) -> float | None:
    """A GPU metric of perf_analyzer's CSV: one value per GPU, written `GPU-<uuid>:<value>;...` (a plain
    number is taken as it is); None where the column is missing or empty."""
    text = row.get(key, "").strip()
    if not text:
        return None
    try:
        values = [float(entry.rpartition(":")[2]) for entry in text.split(";") if entry.strip()]
    except ValueError:
        return None
    return combine(values) if values else None


def point_from_csv(row: Mapping[str, str], model: str, batch: int, requests: int, **more: Any) -> Point:
    """A Point from perf_analyzer's CSV row (perf_analyzer.read_csv_row)."""

    def number(key: str) -> float | None:
        with contextlib.suppress(KeyError, ValueError):
            return float(row[key])
        return None

    latency = {q: number(f"p{q} latency") or 0.0 for q in (50, 90, 95, 99)}
    average = number("Avg latency")
    average = average if average is not None else latency[50]
    chosen = more.get("percentile")
    utilization, memory = per_gpu(row, "Avg GPU Utilization", max), per_gpu(row, "Max GPU Memory Usage", sum)
    return Point(
        model=model,
        concurrency=int(number("Concurrency") or more.pop("concurrency", 0) or 0),
        batch=batch,
        requests=requests,
        infer_per_s=number("Inferences/Second") or 0.0,
        avg_us=average,
        p50_us=latency[50],
        p90_us=latency[90],
        p95_us=latency[95],
        p99_us=latency[99],
        server_us={stage: number(column) or 0.0 for stage, column in CSV_STAGES.items() if column in row},
        latency_us=(number(f"p{chosen:g} latency") or average) if chosen else average,
        gpu_utilization=utilization,
        gpu_memory_mib=None if memory is None else memory / (1 << 20),
        **{key: value for key, value in more.items() if key != "concurrency"},
    )


def _output_bytes(target: Target) -> int:
    sizes = [
        int(np.prod([max(d, 1) for d in spec.shape])) * np.dtype(triton_to_np_dtype(spec.datatype)).itemsize
        for spec in target.expected
        if spec.datatype != "BYTES"
    ]
    return max(sizes, default=0)


def perf_analyzer_command(
    args: argparse.Namespace, target: Target, batch: int, level: float, data: Path, out: Path
) -> list[str]:
    """perf_analyzer's arguments for one point: `level` a concurrency, or a rate with --request-rate."""
    binary, why = find_perf_analyzer()
    if binary is None:
        raise PerfError(why)
    rated = bool(getattr(args, "request_rate", None))
    command = [binary, "-m", target.name, "-u", args.url, "-i", args.protocol, "-b", str(batch)]
    command += ["--input-data", str(data), "-f", str(out), "--verbose-csv"]
    command += ["-p", f"{args.measurement_interval:.0f}", "-s", f"{args.stability_percentage:g}"]
    command += ["--max-trials", str(args.max_windows)]
    if rated:
        command += [
            "--request-rate-range",
            f"{level:g}:{level:g}",
            "--request-distribution",
            args.distribution,
        ]
    else:
        command += ["--concurrency-range", f"{int(level)}:{int(level)}"]
    if args.percentile:
        command += ["--percentile", f"{args.percentile:.0f}"]
    if args.shared_memory != "none":
        size = max(_output_bytes(target), 1 << 10) * 2
        command += ["--shared-memory", args.shared_memory, "--output-shared-memory-size", str(size)]
    if getattr(args, "metrics_url", None):
        command += ["--collect-metrics", "--metrics-url", f"http://{args.metrics_url}/metrics"]
    return command


OPTIONAL_SHARED_MEMORY = "does not support optional inputs"
"""perf_analyzer 2.41's refusal of shared memory where the data leaves out an optional input ("Shared memory
support in Perf Analyzer does not support optional inputs at this time"); with every input given it runs."""


def optional_inputs_in_shared_memory(target: Target, mode: str) -> str:
    """The one line for perf_analyzer's refusal: what, why and what to do."""
    left = ", ".join(repr(name) for name in target.left_out) or "some"
    return (
        f"perf_analyzer on {target.name!r}: --shared-memory {mode} is refused where the data leaves out "
        f"optional inputs ({left}): perf_analyzer 2.41's shared memory does not support them. Run without "
        "--shared-memory, or give every optional input too (--shape NAME:DIMS, or its data)"
    )


def measure_point(args: argparse.Namespace, target: Target, batch: int, level: float, data: Path) -> Point:
    """One point through perf_analyzer; a point that does not settle is measured again over
    UNSETTLED_WINDOWS windows, marked unstable."""
    out = data.with_suffix(".csv")
    command = perf_analyzer_command(args, target, batch, level, data, out)
    rated = bool(getattr(args, "request_rate", None))
    load = {"request_rate": level} if rated else {"concurrency": int(level)}
    for attempt in (command, [*command, "-s", "1e9", "--max-trials", str(UNSETTLED_WINDOWS)]):
        out.unlink(missing_ok=True)
        done = subprocess.run(attempt, capture_output=True, text=True)
        row = read_csv_row(out.read_text()) if out.is_file() else {}
        if row:
            point = point_from_csv(
                row, target.name, batch, request_count(done.stdout), percentile=args.percentile, **load
            )
            point.stable = attempt is command
            return point
        if OPTIONAL_SHARED_MEMORY in done.stdout + done.stderr:
            raise PerfError(optional_inputs_in_shared_memory(target, args.shared_memory))
        if "stable measurement" not in done.stdout + done.stderr:
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            errors = [line for line in lines if "error" in line.lower() or "fail" in line.lower()]
            last = (errors or lines or [f"exit status {done.returncode}"])[-1]
            raise PerfError(f"perf_analyzer on {target.name!r}: {one_line(last)}")
    raise PerfError(f"perf_analyzer on {target.name!r} at {level:g}: no measurement")


# --- the options perf and tune share ---------------------------------------------------------------------


def load_range(kind: type, low: float) -> Any:
    """perf_analyzer's --concurrency-range / --request-rate-range START:END[:STEP] (END included)."""

    def parse(text: str) -> list[Any]:
        try:
            parts = [kind(part) for part in text.split(":")]
        except ValueError:
            parts = []
        if not 2 <= len(parts) <= 3 or parts[0] < low or parts[1] < parts[0] or min(parts) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected START:END[:STEP] with 0 < START <= END")
        step = parts[2] if len(parts) == 3 else (1 if kind is int else parts[1] - parts[0] or 1.0)
        values, value = [], parts[0]
        while value <= parts[1] + 1e-9:
            values.append(round(value, 9) if kind is float else value)
            value += step
        return values

    return parse


def percentile(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1 <= value <= 99:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentile from 1 to 99 (e.g. 95)")
    return value


def add_measurement_options(
    parser: argparse.ArgumentParser, measurement_interval_ms: float, max_windows: int
) -> None:
    """How a point is measured, the same in perf and tune (perf_analyzer's options of the same names):
    protocol, shared memory, the windows and the latency that judges them. resolve_shared_memory completes
    them after parsing."""
    parser.add_argument(
        "-i", "--protocol", choices=["http", "grpc"], default="http", type=str.lower, help="default http"
    )
    parser.add_argument(
        "--shared-memory",
        choices=["none", "system", "cuda"],
        default="none",
        help="inputs and outputs in registered regions: system shared memory (a client on the server's host) "
        "or CUDA shared memory (GPU hosts); default none: in the request body",
    )
    parser.add_argument("--cuda-shm", action="store_true", help="short for --shared-memory cuda")
    parser.add_argument(
        "-p",
        "--measurement-interval",
        type=positive(float, "milliseconds above 0"),
        default=measurement_interval_ms,
        metavar="MS",
        help="length of a measurement window (default %(default)g ms)",
    )
    parser.add_argument(
        "-s",
        "--stability-percentage",
        type=positive(float, "a percentage above 0"),
        default=10.0,
        metavar="PCT",
        help="the last 3 windows must agree within it (default 10)",
    )
    parser.add_argument(
        "--max-windows",
        "--max-trials",
        type=positive(int, "1 or more"),
        default=max_windows,
        metavar="N",
        help="windows per point at most (default %(default)s)",
    )
    parser.add_argument(
        "--percentile",
        type=percentile,
        metavar="P",
        help="the latency percentile (1-99) that judges stability, the latency limit and the report "
        "(default: the mean, as perf_analyzer)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2,...",
        help="an input's dims without the batch axis, for its open axes (as perf_analyzer's --shape; "
        "NAME=... too, and the whole shape with the batch axis first sets -b)",
    )
    add_request_data_options(parser)


def resolve_shared_memory(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--cuda-shm is short for --shared-memory cuda; the two disagreeing is an error."""
    if args.cuda_shm and args.shared_memory not in ("none", "cuda"):
        parser.error(f"--cuda-shm and --shared-memory {args.shared_memory}: give one")
    args.shared_memory = "cuda" if args.cuda_shm else args.shared_memory
