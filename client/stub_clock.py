"""Where a served execute's compute_infer goes, by the clock: before execute(), inside it, after it.

    python -m client.stub_clock --model demo --variants _timed _null_kernel_timed [--steps]

Triton's compute_infer of a python-backend model runs from the server sending the requests to the stub
until the stub's answer arrives (python_backend r24.10, ModelInstanceState::ProcessRequests). The `_timed`
variants of the benchmark repository (client/bench_timed_model.py) record each execute()'s start and end
inside the stub on CLOCK_MONOTONIC; one tritonserver with Triton's trace on (every request, TIMESTAMPS,
the same clock) gives each request's COMPUTE_INPUT_END and COMPUTE_OUTPUT_START, which the python backend
sets to the start and end of compute_infer. Matched execute by execute, µs per execute:

  before   the stub's work before execute(): waking on the message, reading the requests from shared
           memory (a GPU input's CUDA IPC handle is opened here)
  execute  execute() itself, as the model's Python sees it
  after    the stub's work after execute() until the server has its answer: the returned responses'
           output tensors written to shared memory, the answer's message

An execute's requests and responses are dropped after the answer is sent (a GPU input's CUDA IPC handle is
closed then), so that work is in no compute_infer; at concurrency above 1 it can delay the next execute's
`before`. client.ab reports the untraced whole of it (compute_infer less execute, per execute) for the
same variants (measure_point's `stub_clock`), at any concurrency: tracing every request is for low rates
only (Triton 2.51 crashed under it at concurrency 16 on the GPU host, as server issue #7795 reports).

With --steps the server runs with TRITON_ORT_LOG_LEVEL=DEBUG, and ours' variants add the library's own
timers per execute (the `execute stats` records logged during the point, mean µs): read_inputs, the infer
(its stream_sync, ORT's run, binding, the host copies, the metrics) and responses. A debug line per
execute costs a little itself; compare ours with ours, not with the null models, in such a run.

With --profile SKIP:COUNT each stub also profiles a window of its executes with torch.profiler (CUPTI) and
writes the totals by name into profile-<pid>.txt in the model's folder (client/bench_timed_model.py).
The profiler slows the stub several times over: the point's own figures are not comparable then.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from client.bench_common import (
    BATCH,
    add_point_arguments,
    aligned,
    measure_point,
    read_clocks,
    report_of,
    serving,
    write_report,
)
from client.load import Workload
from triton_ort.harness.server import exit_on_termination
from triton_ort.stats import ExecuteStats

SLACK_NS = 20_000_000
"""An execute is matched to a compute window at most this much longer than itself (20 ms)."""


def compute_windows(trace: list[dict[str, Any]], model: str) -> list[tuple[int, int, int]]:
    """Triton's trace as the model's executes: (compute start, compute end, requests), sorted; an execute's
    requests share the python backend's compute start and end (COMPUTE_INPUT_END, COMPUTE_OUTPUT_START)."""
    models: dict[int, str] = {}
    stamps: dict[int, dict[str, int]] = defaultdict(dict)
    for entry in trace:
        if "model_name" in entry:
            models[entry["id"]] = entry["model_name"]
        for stamp in entry.get("timestamps", ()):
            stamps[entry["id"]][stamp["name"]] = int(stamp["ns"])
    windows: dict[tuple[int, int], int] = defaultdict(int)
    for trace_id, named in stamps.items():
        if models.get(trace_id) == model and {"COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"} <= named.keys():
            windows[(named["COMPUTE_INPUT_END"], named["COMPUTE_OUTPUT_START"])] += 1
    return sorted((start, end, count) for (start, end), count in windows.items())


def split_executes(
    windows: list[tuple[int, int, int]], entries: np.ndarray[Any, Any], since_ns: int, until_ns: int
) -> dict[str, float]:
    """The stub's executes that started in [since_ns, until_ns), each matched to the tightest compute
    window that holds it and has as many requests: mean and median µs before, inside and after it."""
    starts = [start for start, _, _ in windows]
    parts: dict[str, list[float]] = {"before": [], "execute": [], "after": [], "compute_infer": []}
    unmatched = 0
    for started, ended, requests in entries.tolist():
        if not since_ns <= started < until_ns:
            continue
        best = None
        for index in range(bisect.bisect_right(starts, started) - 1, -1, -1):
            start, end, count = windows[index]
            if started - start > SLACK_NS:
                break
            if end >= ended and count == requests and (best is None or end - start < best[1] - best[0]):
                best = (start, end)
        if best is None:
            unmatched += 1
            continue
        parts["before"].append((started - best[0]) / 1e3)
        parts["execute"].append((ended - started) / 1e3)
        parts["after"].append((best[1] - ended) / 1e3)
        parts["compute_infer"].append((best[1] - best[0]) / 1e3)
    split: dict[str, float] = {"matched": len(parts["execute"]), "unmatched": unmatched}
    for part, values in parts.items():
        split[f"{part}_mean_us"] = statistics.fmean(values) if values else 0.0
        split[f"{part}_median_us"] = statistics.median(values) if values else 0.0
    return split


def mean_steps(records: list[ExecuteStats]) -> dict[str, float]:
    """The library's timers (µs) averaged over an execute's records; {} for a model that logs none."""
    steps: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for step, us in record.steps_us.items():
            steps[step].append(us)
    return {step: statistics.fmean(values) for step, values in steps.items()} | (
        {"records": float(len(records))} if records else {}
    )


def read_trace(folder: Path) -> list[dict[str, Any]]:
    """Every trace file Triton wrote (trace.json and, with a log frequency, trace.json.<n>)."""
    entries: list[dict[str, Any]] = []
    for path in sorted(folder.glob("trace.json*")):
        text = path.read_text().strip()
        if text:
            entries.extend(json.loads(text))
    return entries


def run(args: argparse.Namespace) -> dict[str, Any]:
    served = [args.model + variant for variant in args.variants]
    work = Workload.build(args.model, args.repository, BATCH[args.model])
    env = {"TRITON_ORT_LOG_LEVEL": "DEBUG"} if args.steps else {}
    if args.profile:
        env["BENCH_STUB_PROFILE"] = args.profile
    points: dict[str, dict[str, Any]] = defaultdict(dict)
    windows: list[tuple[str, int, int, dict[str, Any]]] = []  # (served, since, until, its point)
    with tempfile.TemporaryDirectory(prefix="stub-clock-") as folder:
        trace_args = (
            []
            if args.no_trace
            else [
                f"--trace-config=triton,file={Path(folder) / 'trace.json'}",
                "--trace-config=triton,log-frequency=2000",
                "--trace-config=rate=1",
                "--trace-config=level=TIMESTAMPS",
            ]
        )
        with serving(
            args.repository, served, extra_args=trace_args, log_verbose=int(args.steps), env=env
        ) as server:
            for name in served:
                for concurrency in args.concurrency:
                    logged = len(ExecuteStats.from_log(server.log())) if args.steps else 0
                    since = time.monotonic_ns()
                    point = measure_point(
                        server.grpc_url, name, work, concurrency, args, args.repository / name
                    )
                    if args.steps:
                        point["steps_us"] = mean_steps(ExecuteStats.from_log(server.log())[logged:])
                    points[name][str(concurrency)] = point
                    windows.append((name, since, time.monotonic_ns(), point))
                    print(f"{name} c={concurrency}: {point['requests_per_s']:.0f} req/s", file=sys.stderr)
        trace = [] if args.no_trace else read_trace(Path(folder))  # written by the server as it stopped
    if not args.no_trace:
        for name in served:  # each model's compute windows and stub clocks, once for all its points
            executes = compute_windows(trace, name)
            clocks = read_clocks(args.repository / name)
            entries = np.concatenate([c.entries for c in clocks.values()]) if clocks else np.empty((0, 3))
            for _, since, until, point in (w for w in windows if w[0] == name):
                point["split"] = split_executes(executes, entries, since, until)
    return points


def summary(points: dict[str, dict[str, Any]]) -> str:
    """One row per served model and concurrency: with the trace, each part's mean / median; without it,
    the stub clock's means (compute_infer and execute per execute)."""
    header = ["served", "c", "req/s", "req/exec", "matched", "compute_infer", "before", "execute", "after"]
    rows = []
    for name, by_concurrency in points.items():
        for concurrency, point in by_concurrency.items():
            row = [
                name,
                concurrency,
                f"{point['requests_per_s']:.0f}",
                f"{point['requests_per_execute']:.1f}",
            ]
            split = point.get("split")
            if split is None:
                clock = point.get("stub_clock", {})
                row += [
                    "-",
                    f"{clock.get('compute_infer_us', 0):.0f}",
                    "-",
                    f"{clock.get('execute_us', 0):.0f}",
                    "-",
                ]
            else:
                row += [f"{split['matched']}"] + [
                    f"{split[f'{part}_mean_us']:.0f} / {split[f'{part}_median_us']:.0f}"
                    for part in ("compute_infer", "before", "execute", "after")
                ]
            rows.append(row)
    text = "µs per execute, mean / median\n" + aligned(header, rows, numbers=range(1, len(header)))
    for name, by_concurrency in points.items():
        for concurrency, point in by_concurrency.items():
            if point.get("steps_us"):
                steps = ", ".join(f"{step} {us:.0f}" for step, us in sorted(point["steps_us"].items()))
                text += f"\n{name} c={concurrency} library steps (µs per execute): {steps}"
    return text


def main() -> None:
    exit_on_termination()  # a stopped run still stops the server it started
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="demo", choices=sorted(BATCH))
    parser.add_argument("--variants", nargs="+", default=["_timed", "_null_kernel_timed"])
    add_point_arguments(parser)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1])
    parser.add_argument("--steps", action="store_true", help="also the library's step timers (debug log)")
    parser.add_argument(
        "--no-trace",
        action="store_true",
        help="without Triton's trace: the stub clock and steps only (any load)",
    )
    parser.add_argument(
        "--profile",
        metavar="SKIP:COUNT",
        help="each stub profiles its executes SKIP to SKIP+COUNT (torch.profiler) into profile-<pid>.txt in "
        "the model's folder (client/bench_timed_model.py)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    points = run(args)
    report = report_of("client.stub_clock", points=points)
    if args.json:
        write_report(args.json, report)
    print(summary(points))


if __name__ == "__main__":
    main()
