"""What a CUDA graph saves a run of the demo, in-process on a GPU: no graph, a graph per exact input shape,
and a graph per bucket of batch sizes (the batch padded to the next power of two: runner.py, "CUDA graphs",
what the demo ships). Each way serves one request of 100 rows (padded to 128 in a bucket), one of 128 (a
bucket's own size), and four and five gathered requests of 100 rows (400 and 500 rows: buckets of 512), as
ModelInstance does: the runner's run, or run_requests for the gathered ones, then one stream sync.
Time per execute (mean and median), after 50 warm-up executes (which capture the graphs); the runner's graph
ids and plans after them, and ORT's own share (run_with_iobinding) per run.

Beside them, `null kernel`: the in-process part of the served null-kernel anchor
(client/anchors/null_model.py, 'kernel'): one small kernel on each request's input, then one stream sync,
and no ORT. With --idle-ms the GPU idles that long between executes (untimed), as it does between requests
at concurrency 1: ours' lone request against null kernel's then is the least a served c=1 request of ours
can cost above null-kernel's.

    python -m diagnostics.bench_graphs [--executes 1500] [--idle-ms 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from client.bench_common import DEMO_ONNX, host_environment, write_report
from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session, run_requests

WAYS = {"no graph": (False, False), "graph per shape": (True, False), "graph per bucket": (True, True)}
POINTS = {"1x100": (1, 100), "1x128": (1, 128), "4x100": (4, 100), "5x100": (5, 100)}


def _runner(stream: torch.cuda.Stream, graph: bool, buckets: bool) -> IOBindingRunner:
    where = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(DEMO_ONNX, ModelOptions(cuda_graph=graph), where), where, cuda_graph=graph
    )
    if buckets and not runner.pad_graph_batches(1024):
        raise SystemExit("the demo's graphs would not pad to buckets")
    return runner


def _execute_times_us(
    runner: IOBindingRunner | None,
    stream: torch.cuda.Stream,
    requests: int,
    rows: int,
    executes: int,
    idle_s: float,
) -> list[float]:
    """Each execute's time (µs); without a runner, null kernel's execute."""
    xs = [{"np_script_embeddings": torch.randn(rows, 2010, device="cuda")} for _ in range(requests)]

    def execute() -> None:
        with torch.cuda.stream(stream):
            if runner is None:
                for x in xs:
                    x["np_script_embeddings"][:1].sum()
            elif requests == 1:
                runner.reclaim_outputs()
                runner.run(xs[0])
            else:
                runner.reclaim_outputs()
                run_requests(runner, xs, gather=True)
        stream.synchronize()

    for _ in range(50):
        execute()
    times = []
    for _ in range(executes):
        if idle_s:
            time.sleep(idle_s)
        started = time.perf_counter()
        execute()
        times.append((time.perf_counter() - started) * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--executes", type=int, default=1500)
    parser.add_argument("--idle-ms", type=float, default=0.0, help="untimed GPU idle between executes")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("diagnostics.bench_graphs needs a CUDA GPU")
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    idle_s = args.idle_ms / 1e3
    results: dict[str, Any] = {}
    print(f"µs per execute (mean / median){f', {args.idle_ms:g} ms idle between executes' if idle_s else ''}")
    print(f"{'way':<18}" + "".join(f"{p:>14}" for p in POINTS) + "  graph ids  plans  ORT us/run")
    for way in (*WAYS, "null kernel"):
        runner = _runner(stream, *WAYS[way]) if way in WAYS else None
        times = {
            p: _execute_times_us(runner, stream, n, r, args.executes, idle_s) for p, (n, r) in POINTS.items()
        }
        us = {p: round(statistics.fmean(t), 1) for p, t in times.items()}
        p50 = {p: round(statistics.median(t), 1) for p, t in times.items()}
        stats = runner.stats if runner else None
        ort_us = stats.ort_run_seconds / max(stats.ort_runs, 1) * 1e6 if stats else 0.0
        results[way] = {
            "us_per_execute": us,
            "p50_us": p50,
            "graph_ids": runner.plans.graph_ids_given if runner else 0,
            "plans": runner.plans.count if runner else 0,
            "ort_us_per_run": round(ort_us, 1),
        }
        print(
            f"{way:<18}"
            + "".join(f"{f'{us[p]:.0f} / {p50[p]:.0f}':>14}" for p in POINTS)
            + f"  {results[way]['graph_ids']:>9}  {results[way]['plans']:>5}  {ort_us:>10.0f}"
        )
    if args.json:
        write_report(
            Path(args.json),
            {
                "environment": host_environment(),
                "command": "python -m diagnostics.bench_graphs"
                + (f" --idle-ms {args.idle_ms:g}" if idle_s else ""),
                "executes": args.executes,
                "idle_ms": args.idle_ms,
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
