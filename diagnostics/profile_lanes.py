"""Do K ONNX Runtime sessions, each on a CUDA stream of its own and driven by a thread of its own, overlap
in one process? The question under the in-flight mode (one stub, several requests in flight): measured
here outside Triton first, so that what serialises in ORT and CUDA is told apart from what the python
backend adds.

For each lane count K: K sessions of one ONNX file (our create_session, each with its stream as ORT's
compute stream; no CUDA graphs) and K threads. Each thread runs its session on one input for --seconds:
a CUDA event on its stream before and after each run, then its stream's synchronize, as an execute does.
Per K it reports
  runs_per_s        all lanes together
  gpu_busy          the fraction of the wall time in which some lane's run was on the GPU (union of the
                    runs' event intervals, read against one reference event)
  gpu_overlap       the sum of the runs' GPU intervals over their union: 1.0 = one at a time, K = all K
                    at once
  host_in_run_us    mean wall time of one run() call on the host (ORT releases the GIL inside it)
  host_cpu_us       mean thread CPU time of one run() call: near host_in_run_us means the thread is busy
                    launching, well under it means it waits (on the GPU, a lock, or the GIL on its way out)
  host_outside_us   mean wall time per iteration outside run() and synchronize: the thread's own Python,
                    which holds the GIL
  sync_wait_us      mean wall time in synchronize
  session_mib       on a GPU, the device memory each lane's session took when it was made, each with its
                    own weights, or with --shared-weights over one copy made with the first (as an
                    instance's lanes are: the difference is what sharing saves)
On a CPU the same runs go through the CPU provider and the GPU columns are absent (a smoke run; the
question is the GPU's).

    python -m diagnostics.profile_lanes --onnx bench_repository/mlp4096/1/model.onnx --batch 1024 \\
        --lanes 1 2 4 --json results/lanes.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from client.bench_common import DEMO_ONNX, report_of, write_report
from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session
from triton_ort.runtime.session import SharedWeights, shared_weights


@dataclass
class LaneRecord:
    """One lane's iterations: host timings (s) and, on a GPU, each run's CUDA events."""

    in_run: list[float] = field(default_factory=list)
    cpu_in_run: list[float] = field(default_factory=list)
    outside: list[float] = field(default_factory=list)
    sync_wait: list[float] = field(default_factory=list)
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the intervals (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _lane(
    onnx_path: Path, gpu: bool, shared: SharedWeights | None
) -> tuple[IOBindingRunner, torch.cuda.Stream | None]:
    stream = torch.cuda.Stream() if gpu else None  # type: ignore[no-untyped-call]
    where = Placement("cuda", 0, stream.cuda_stream) if stream else Placement("cpu")
    return IOBindingRunner(create_session(onnx_path, ModelOptions(), where, shared), where), stream


def _device_used_mib() -> float:
    """Device memory in use on the current GPU, all allocators (ORT's arena is not torch's), in MiB."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


def measure(
    onnx_path: Path, lanes: int, batch: int, seconds: float, warmup: float, share: bool = False
) -> dict[str, Any]:
    gpu = torch.cuda.is_available()
    built = []
    session_mib = []  # on a GPU: what each lane's session took when it was made (its weights, ORT's state)
    shared = None
    for _ in range(lanes):
        before = _device_used_mib() if gpu else 0.0
        if share and gpu and shared is None:  # made once, counted with the first lane, as an instance does
            shared = shared_weights(onnx_path, Placement("cuda", 0))
        built.append(_lane(onnx_path, gpu, shared))
        if gpu:
            session_mib.append(round(_device_used_mib() - before, 1))
    spec = built[0][0].inputs[0]
    inner = [int(d) for d in spec.shape[1:] if d is not None]  # models with fixed inner axes
    records = [LaneRecord() for _ in range(lanes)]
    start = threading.Barrier(lanes + 1)  # the measured window opens when every lane is warm
    reference = _timing_event() if gpu else None

    def drive(index: int) -> None:
        runner, stream = built[index]
        record = records[index]
        x = torch.randn(batch, *inner, device=runner.device)
        with torch.cuda.stream(stream) if stream else contextlib.nullcontext():
            warm_until = time.perf_counter() + warmup
            while time.perf_counter() < warm_until:
                runner.reclaim_outputs()
                runner.run({spec.name: x})
                if stream:
                    stream.synchronize()
            start.wait()
            last = time.perf_counter()
            stop_at = last + seconds
            while last < stop_at:
                runner.reclaim_outputs()
                if stream:
                    before, after = _timing_event(), _timing_event()
                    before.record(stream)
                t0, c0 = time.perf_counter(), time.thread_time()
                runner.run({spec.name: x})
                t1, c1 = time.perf_counter(), time.thread_time()
                if stream:
                    after.record(stream)
                    stream.synchronize()
                    record.events.append((before, after))
                t2 = time.perf_counter()
                record.outside.append(t0 - last)
                record.in_run.append(t1 - t0)
                record.cpu_in_run.append(c1 - c0)
                record.sync_wait.append(t2 - t1)
                last = time.perf_counter()

    threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(lanes)]
    for thread in threads:
        thread.start()
    if reference is not None:  # before any measured run: every run's events are read against it
        reference.record(torch.cuda.current_stream())
        torch.cuda.synchronize()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    runs = sum(len(r.in_run) for r in records)

    def mean_us(values: list[float]) -> float:
        return statistics.fmean(values) * 1e6 if values else 0.0

    every = [v for r in records for v in r.in_run]
    result: dict[str, Any] = {
        "lanes": lanes,
        "runs": runs,
        "runs_per_s": runs / wall,
        "host_in_run_us": mean_us(every),
        "host_cpu_us": mean_us([v for r in records for v in r.cpu_in_run]),
        "host_outside_us": mean_us([v for r in records for v in r.outside]),
        "sync_wait_us": mean_us([v for r in records for v in r.sync_wait]),
        "runs_per_lane": [len(r.in_run) for r in records],
    }
    if gpu:
        result["session_mib"] = session_mib
        result["device_used_mib_after_runs"] = round(_device_used_mib(), 1)
    if reference is not None:
        intervals = [
            (reference.elapsed_time(a) / 1e3, reference.elapsed_time(b) / 1e3)
            for r in records
            for a, b in r.events
        ]
        covered = union_length(intervals)
        span = max(e for _, e in intervals) - min(s for s, _ in intervals)
        result["gpu_run_us"] = statistics.fmean(e - s for s, e in intervals) * 1e6
        result["gpu_busy"] = covered / span if span else 0.0
        result["gpu_overlap"] = sum(e - s for s, e in intervals) / covered if covered else 0.0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--onnx", type=Path, default=DEMO_ONNX)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--shared-weights",
        action="store_true",
        help="on a GPU, every lane's session over one copy of the weights, as an instance's lanes are",
    )
    args = parser.parse_args()
    results = [
        measure(args.onnx, k, args.batch, args.seconds, args.warmup, args.shared_weights) for k in args.lanes
    ]
    for r in results:
        gpu = (
            f", GPU busy {r['gpu_busy']:.2f}, overlap {r['gpu_overlap']:.2f}, run {r['gpu_run_us']:.0f} us, "
            f"sessions {r['session_mib']} MiB"
            if "gpu_busy" in r
            else ""
        )
        print(
            f"{r['lanes']} lanes: {r['runs_per_s']:.0f} runs/s{gpu}; host per run: in run() "
            f"{r['host_in_run_us']:.0f} us (CPU {r['host_cpu_us']:.0f}), outside {r['host_outside_us']:.0f}, "
            f"sync {r['sync_wait_us']:.0f}"
        )
    if args.json:
        report = report_of(
            "diagnostics.profile_lanes",
            onnx=args.onnx.name,
            batch=args.batch,
            seconds=args.seconds,
            shared_weights=args.shared_weights,
            results=results,
        )
        write_report(args.json, report)


if __name__ == "__main__":
    main()
