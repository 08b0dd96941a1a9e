"""Pipelines measured the four ways they can be served, in one run: our hooked model against an ensemble,
BLS and the tutorial model.py (client/pipelines.py says what each is), and the ensemble with Triton's
native onnxruntime backend as its ONNX member where the host has that backend.

    python -m client.bench_pipelines --out results/pipelines.json                    # every pipeline
    python -m client.bench_pipelines --pipelines embeddings --native-backend DIR      # one, with native

Each pipeline gets a server of its own with its models loaded (the ensemble with a native member another,
so that its tritonserver's memory is the native member's). Every way answers one request, checked against
the reference (ORT on the CPU, then the numpy post-processing), before it is measured: p50 at c=1 (one
synchronous client) and requests per second at the top concurrency (client.load's closed loop; CUDA
shared memory on GPUs, numpy over gRPC elsewhere). Then memory: each way's stubs (RSS and GPU memory) and
tritonserver's own (ensembles and a native member run inside it; on a GPU it holds the 2 GiB CUDA pool
that bench_common.serving gives it). Requests per execute are the model's that gets the client's request
(an ensemble has no executes of its own: '-'). The ratio table holds the hooked model against the
ensemble and BLS: the target is >= 1.3x their throughput and <= 0.8x their p50.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from client.bench_common import (
    NGC_NATIVE_BACKEND,
    ROOT,
    add_native_backend_argument,
    add_point_arguments,
    aligned,
    execute_steps,
    measure_point,
    native_backend_folder,
    report_of,
    serving,
    write_report,
)
from client.load import Workload
from client.pipelines import LEVERS, NATIVE_WAY, PIPELINES, Pipeline, write_repository
from triton_ort.harness.processes import MIB, MemorySnapshot, stub_processes
from triton_ort.harness.server import exit_on_termination

TARGET_RATE, TARGET_P50 = 1.3, 0.8
"""The hooked model against the ensemble and BLS: at least this many times their c=top throughput, at
most this many times their c=1 p50."""


def way_memory(server_pid: int, models: list[str]) -> dict[str, Any]:
    """RSS and GPU memory (MiB) of the stubs that serve `models`, and of tritonserver itself."""
    snapshot = MemorySnapshot.of(server_pid)
    stubs = {pid: Path(path).parent.parent.name for pid, path in stub_processes(server_pid).items()}
    pids = [pid for pid, model in stubs.items() if model in models]
    gpu = snapshot.gpu
    return {
        "stubs": len(pids),
        "stub_rss_mib": sum(snapshot.rss.get(pid, 0) for pid in pids) / MIB,
        "stub_gpu_mib": None if gpu is None else sum(gpu.get(pid, 0) for pid in pids) / MIB,
        "server_rss_mib": snapshot.rss.get(server_pid, 0) / MIB,
        "server_gpu_mib": None if gpu is None else gpu.get(server_pid, 0) / MIB,
    }


def measure_ways(
    pipeline: Pipeline,
    repository: Path,
    work: Workload,
    ways: dict[str, list[str]],
    args: argparse.Namespace,
    **serving_options: Any,
) -> dict[str, Any]:
    """`ways` served by one server of their own: points at each concurrency, then memory per way."""
    loaded = sorted({model for models in ways.values() for model in models})
    measured: dict[str, Any] = {}
    with serving(repository, loaded, **serving_options) as server:
        for way, models in ways.items():
            points = {}
            for concurrency in args.concurrency:
                print(f"measuring {pipeline.name} {way} c={concurrency}", file=sys.stderr, flush=True)
                points[str(concurrency)] = measure_point(
                    server.grpc_url, models[0], work, concurrency, args, agree=pipeline.agree
                )
            measured[way] = {"models": models, "points": points}
        assert server.process is not None
        for entry in measured.values():
            entry["memory"] = way_memory(server.process.pid, entry["models"])
    return measured


def bench_pipeline(
    pipeline: Pipeline, repository: Path, onnx_path: Path, native: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Every way of one pipeline in one server; the ensemble with a native member, where there is one,
    in a server of its own (its tritonserver's memory is then the native member's and the ensemble's,
    and a native backend that fails to load takes only that way down)."""
    work = pipeline.workload(onnx_path, args.batch)
    ways = pipeline.models(native is not None)
    native_way = {NATIVE_WAY: ways.pop(NATIVE_WAY)} if native else {}
    result: dict[str, Any] = {
        "batch": args.batch,
        "ways": measure_ways(pipeline, repository, work, ways, args),
    }
    if args.profile:
        result["hooked_steps"] = profile_hooked(pipeline, repository, work, args)
    if native_way:
        try:
            backends = {"onnxruntime": native}
            result["ways"] |= measure_ways(pipeline, repository, work, native_way, args, backends=backends)
        except Exception as error:  # reported; the other ways' figures stand
            print(
                f"{pipeline.name}: {NATIVE_WAY} could not be measured: {str(error)[-2000:]}", file=sys.stderr
            )
    return result


def bench_levers(
    pipeline: Pipeline, repository: Path, onnx_path: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """The hooked model, each of its LEVERS (one thing changed) and the naive model, at the top
    concurrency only, in one server: which lever moves the p99 and the rate."""
    work = pipeline.workload(onnx_path, args.batch)
    ways = {"hooked": [f"{pipeline.name}_hooked"], "naive": [f"{pipeline.name}_naive"]}
    ways |= {f"hooked_{lever}": [f"{pipeline.name}_hooked_{lever}"] for lever in LEVERS}
    top = argparse.Namespace(**{**vars(args), "concurrency": args.concurrency[1:]})
    return {"batch": args.batch, "ways": measure_ways(pipeline, repository, work, ways, top)}


def lever_table(results: dict[str, Any], top: str) -> str:
    rows = []
    for name, result in results.items():
        for way, entry in result["ways"].items():
            point = entry["points"][top]
            rows.append(
                [
                    name,
                    way,
                    f"{point['requests_per_s']:.0f}",
                    f"{point['p50_us']:.0f}",
                    f"{point['p99_us']:.0f}",
                    f"{point['p99_us'] / point['p50_us']:.1f}",
                    f"{point['stages_us']['compute_infer']:.0f}",
                ]
            )
    header = ["pipeline", "way", f"req/s c={top}", "p50 us", "p99 us", "p99/p50", "compute_infer us"]
    return aligned(header, rows, numbers=range(2, 7))


def profile_hooked(
    pipeline: Pipeline, repository: Path, work: Workload, args: argparse.Namespace
) -> dict[str, Any]:
    """Where the hooked model's time goes: its steps per execute at c=1 (bench_common.execute_steps), in a
    server of its own with debug logging on (so that the logging's cost stays out of the measured points).
    infer_total less bind, ort_run and device_to_host is the runtime's own and the hooks' share."""
    name = pipeline.models()["hooked"][0]
    debug_log = {"TRITON_ORT_LOG_LEVEL": "DEBUG"}
    with serving(repository, [name], log_verbose=1, env=debug_log) as server:
        start = len(server.log())
        print(f"profiling {name} c=1", file=sys.stderr, flush=True)
        measure_point(server.grpc_url, name, work, 1, args, agree=pipeline.agree)
        return execute_steps(server.log()[start:])


def ratios(result: dict[str, Any], low: str, top: str) -> dict[str, dict[str, float]]:
    """The hooked model's throughput at `top` and p50 at `low` over each other way's."""
    ways = result["ways"]
    hooked = ways["hooked"]["points"]
    return {
        way: {
            "rate": hooked[top]["requests_per_s"] / entry["points"][top]["requests_per_s"],
            "p50": hooked[low]["p50_us"] / entry["points"][low]["p50_us"],
        }
        for way, entry in ways.items()
        if way != "hooked"
    }


def tables(results: dict[str, Any], low: str, top: str) -> str:
    rows = []
    for name, result in results.items():
        for way, entry in result["ways"].items():
            points, memory = entry["points"], entry["memory"]
            gpu = memory["stub_gpu_mib"]
            rows.append(
                [
                    name,
                    way,
                    f"{points[low]['p50_us']:.0f}",
                    f"{points[top]['requests_per_s']:.0f}",
                    f"{points[top]['p50_us']:.0f}",
                    f"{points[top]['p99_us']:.0f}",
                    "-" if "ensemble" in way else f"{points[top]['requests_per_execute']:.1f}",
                    str(memory["stubs"]),
                    f"{memory['stub_rss_mib']:.0f}",
                    "-" if gpu is None else f"{gpu:.0f}",
                ]
            )
    header = [
        "pipeline",
        "way",
        f"c={low} p50 us",
        f"c={top} req/s",
        f"c={top} p50 us",
        f"c={top} p99 us",
        "req/exec",
        "stubs",
        "RSS MiB",
        "GPU MiB",
    ]
    measured = aligned(header, rows, numbers=range(2, 10))
    ratio_rows = []
    for name, result in results.items():
        for way, ratio in ratios(result, low, top).items():
            meets = ratio["rate"] >= TARGET_RATE and ratio["p50"] <= TARGET_P50
            target = "yes" if meets else "no" if way in ("ensemble", "bls", NATIVE_WAY) else ""
            ratio_rows.append([name, way, f"{ratio['rate']:.2f}x", f"{ratio['p50']:.2f}x", target])
    ratio_header = ["pipeline", "hooked against", f"c={top} req/s", f"c={low} p50", "target met"]
    return (
        measured + f"\n\nthe hooked model against each way (target: >= {TARGET_RATE}x the rate, "
        f"<= {TARGET_P50}x the p50)\n" + aligned(ratio_header, ratio_rows, numbers=range(2, 4))
    )


def main() -> None:
    exit_on_termination()  # a stopped benchmark still stops its servers
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # Steady state: 3 s of load before each 5 s window, so every gathered size a point sees has been run
    # (and cuDNN's, ORT's and torch's per-shape set-up done) before it is timed; every way alike.
    add_point_arguments(parser, client_processes=max(1, min(8, (os.cpu_count() or 2) // 2)), warmup=3.0)
    parser.set_defaults(seconds=5.0)
    parser.set_defaults(repository=ROOT / "bench_repository" / "pipelines")
    parser.add_argument("--pipelines", nargs="+", default=sorted(PIPELINES), choices=sorted(PIPELINES))
    parser.add_argument("--batch", type=int, default=8, help="rows per request (default 8)")
    parser.add_argument("--concurrency", type=int, nargs=2, default=[1, 16], metavar=("LOW", "TOP"))
    add_native_backend_argument(parser, "for the ensemble with a native ONNX member")
    parser.add_argument(
        "--profile", action="store_true", help="also time the hooked model's steps per execute (debug server)"
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="instead: the hooked model with one thing changed each (client/pipelines.py LEVERS) and the "
        "naive one, at the top concurrency, p99 beside p50",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "pipelines.json")
    args = parser.parse_args()
    if args.levers:
        built = write_repository(args.repository, args.pipelines)
        report = report_of("client.bench_pipelines --levers", pipelines={})
        for name in args.pipelines:
            report["pipelines"][name] = bench_levers(PIPELINES[name], args.repository, built[name], args)
            write_report(args.out, report)
        print(lever_table(report["pipelines"], str(args.concurrency[1])))
        print(f"\nresults: {args.out}")
        return
    native = native_backend_folder(args.native_backend)
    if native is None:
        print(
            "the ensemble with a native ONNX member: skipped, this host has no native onnxruntime backend "
            f"(--native-backend DIR; NGC's tritonserver images have it at {NGC_NATIVE_BACKEND})",
            file=sys.stderr,
        )
    built = write_repository(args.repository, args.pipelines, native=native is not None)
    report = report_of("client.bench_pipelines", pipelines={})
    for name in args.pipelines:
        report["pipelines"][name] = bench_pipeline(
            PIPELINES[name], args.repository, built[name], native, args
        )
        write_report(args.out, report)
    low, top = map(str, args.concurrency)
    for result in report["pipelines"].values():
        result["hooked_against"] = ratios(result, low, top)
    write_report(args.out, report)
    print(tables(report["pipelines"], low, top))
    for name, result in report["pipelines"].items():
        if "hooked_steps" in result:
            steps = ", ".join(f"{k} {v:.0f}" for k, v in result["hooked_steps"]["steps_us_p50"].items())
            print(f"{name} hooked, per execute at c=1, p50 us (debug server): {steps}")
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
