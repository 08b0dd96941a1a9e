"""What each instance costs and what it buys: memory and throughput by instance count.

    python -m diagnostics.bench_instances --models demo mlp4096 --counts 1 2 4 [--mps] --json FILE
    python -m diagnostics.bench_instances --models mlp4096 --variants inflight4 i4_d0 native_i4 \
        --native-backend DIR --json FILE

`--variants` measures the named variants of each model instead (MODEL_<variant>: `inflight4`, one instance
keeping requests in flight on 4 lanes; `native_i4`, Triton's native onnxruntime backend with 4 instances,
served with --native-backend's folder; `i4_d0`, ours with 4 instances), so that one run sets what each way
of serving costs beside the others.

For each model and instance count, one tritonserver serves only the benchmark repository's variant
MODEL_i<count>_d0 (scripts/build_models.py --bench), so that what it reads belongs to that variant alone:
the requests per second at the top concurrency (client processes as client.bench runs them), then, with
the arenas grown by that load, each process's GPU memory (nvidia-smi's per-process figure) and RSS: the
server's and each stub's, and under --mps the MPS server's too (it holds the clients' shared context).
`device_used_mib` is the whole GPU's use with the server up minus before it started, which also counts
what no process figure shows. --mps measures every point again under CUDA MPS.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from client.bench_common import (
    BATCH,
    add_native_backend_argument,
    add_point_arguments,
    aligned,
    device_used_mib,
    hold_cuda_context,
    measure_point,
    memory_reading,
    native_backend_folder,
    report_of,
    serving,
    settled_device_used_mib,
    write_report,
)
from client.load import Workload
from triton_ort.harness.server import exit_on_termination


def measure_count(model: str, count: int, mps: bool, args: argparse.Namespace) -> dict[str, Any]:
    return {**measure_variant(model, f"i{count}_d0", mps, args), "instances": count}


def measure_variant(model: str, variant: str, mps: bool, args: argparse.Namespace) -> dict[str, Any]:
    """One served variant, MODEL_<variant>: its point and its memory, by a server of its own (a native one
    with the native backend's folder)."""
    served = f"{model}_{variant}"
    work = Workload.build(model, args.repository, BATCH[model])
    backends = {}
    if variant.startswith("native"):
        folder = native_backend_folder(args.native_backend)
        if folder is None:
            raise SystemExit(f"{served}: give the native onnxruntime backend's folder with --native-backend")
        backends = {"onnxruntime": folder}
    before = settled_device_used_mib()  # the previous point's server may still be giving memory back
    with serving(args.repository, [served], mps=mps, backends=backends) as server:
        point = measure_point(server.grpc_url, served, work, args.concurrency, args)
        reading = memory_reading(server.process.pid, mps)
        after = device_used_mib()
    used = None if before is None or after is None else after - before
    return {"model": model, "variant": variant, "mps": mps, **point, **reading, "device_used_mib": used}


def table(rows: list[dict[str, Any]]) -> str:
    header = ["model", "variant", "mps", "req/s", "device MiB", "stub GPU MiB", "stub RSS MiB", "server RSS"]

    def each(values: list[float]) -> str:
        return f"{statistics.mean(values):.0f} x{len(values)}" if values else "-"

    cells = [
        [
            r["model"],
            r["variant"],
            "yes" if r["mps"] else "no",
            f"{r['requests_per_s']:.0f}",
            "-" if r["device_used_mib"] is None else f"{r['device_used_mib']:.0f}",
            each(r["stub_gpu_mib"]),
            each(r["stub_rss_mib"]),
            f"{r['server_rss_mib']:.0f}",
        ]
        for r in rows
    ]
    return aligned(header, cells, numbers=range(3, 8))


def main() -> None:
    exit_on_termination()  # a stopped run still stops the server it started
    hold_cuda_context()
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--models", nargs="+", default=["demo"], choices=sorted(BATCH))
    parser.add_argument("--counts", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--variants", nargs="+", help="MODEL_<variant> names to measure instead of --counts")
    add_native_backend_argument(parser, "for the native_i<count> variants")
    add_point_arguments(parser, client_processes=8, warmup=0.5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--mps", action="store_true", help="every point again under CUDA MPS")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    measure = measure_variant if args.variants else measure_count
    rows = []
    for mps in (False, True) if args.mps else (False,):
        for model in args.models:
            for variant in args.variants or args.counts:
                rows.append(measure(model, variant, mps, args))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)  # as it goes
    report = report_of("diagnostics.bench_instances", results=rows)
    if args.json:
        write_report(args.json, report)
    print(table(rows))


if __name__ == "__main__":
    main()
