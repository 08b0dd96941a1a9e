"""What a CUDA graph saves a run of the demo, in-process on a GPU: no graph, a graph per exact input shape,
and a graph per bucket of batch sizes (the batch padded to the next power of two: runner.py, "CUDA graphs",
what the demo ships). Each way serves one request of 100 rows (padded to 128 in a bucket), one of 128 (a
bucket's own size), and four and five gathered requests of 100 rows (400 and 500 rows: buckets of 512), as
ModelInstance does: the runner's run, or run_requests for the gathered ones, then one stream sync.
Wall time per execute, after 50 warm-up executes (which capture the graphs); the runner's graph ids and
plans after them, and ORT's own share (run_with_iobinding) per run.

    python -m client.bench_graphs [--executes 1500] [--json FILE]
"""

from __future__ import annotations

import argparse
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


def _us_per_execute(
    runner: IOBindingRunner, stream: torch.cuda.Stream, requests: int, rows: int, executes: int
) -> float:
    xs = [{"np_script_embeddings": torch.randn(rows, 2010, device="cuda")} for _ in range(requests)]

    def execute() -> None:
        runner.begin_execute()
        with torch.cuda.stream(stream):
            if requests == 1:
                runner.run(xs[0])
            else:
                run_requests(runner, xs, gather=True)
        stream.synchronize()

    for _ in range(50):
        execute()
    started = time.perf_counter()
    for _ in range(executes):
        execute()
    return (time.perf_counter() - started) / executes * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--executes", type=int, default=1500)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("client.bench_graphs needs a CUDA GPU")
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    results: dict[str, Any] = {}
    print(f"{'way':<18}" + "".join(f"{p:>8}" for p in POINTS) + "  graph ids  plans  ORT us/run")
    for way, (graph, buckets) in WAYS.items():
        runner = _runner(stream, graph, buckets)
        us = {
            p: round(_us_per_execute(runner, stream, n, r, args.executes), 1) for p, (n, r) in POINTS.items()
        }
        ort_us = runner.stats.ort_run_seconds / max(runner.stats.ort_runs, 1) * 1e6
        results[way] = {
            "us_per_execute": us,
            "graph_ids": runner.graph_ids_given,
            "plans": runner.plan_count,
            "ort_us_per_run": round(ort_us, 1),
        }
        print(
            f"{way:<18}"
            + "".join(f"{v:>8.0f}" for v in us.values())
            + f"  {runner.graph_ids_given:>9}  {runner.plan_count:>5}  {ort_us:>10.0f}"
        )
    if args.json:
        write_report(
            Path(args.json),
            {
                "environment": host_environment(),
                "command": "python -m client.bench_graphs",
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
