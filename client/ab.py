"""Served variants of a model, measured interleaved in one server: which choice costs what, beyond noise.

    python -m client.ab --model demo --variants "" _naive _null_host _null_kernel _plain --rounds 3
    python -m client.ab --model demo --idle-probe          # in-process only: what an idle gap costs a run

`client.bench` measures each anchor once, one after the other, so a drift of the machine between two
anchors reads as a difference between them. Here every round measures every variant (in a rotated order),
and a variant's figure is the median of its rounds, with their spread beside it: a difference smaller
than the spread is noise. The variants are the benchmark repository's (scripts/build_models.py --bench).

Per variant: p50 at each concurrency, requests per second, Triton's stages (µs per request) and the
requests an execute gathered. With --idle-probe, in-process runs of the same ONNX file: back to back,
after a 1 ms sleep, and after 1 ms of busy waiting (the CPU kept awake, the GPU idle), with the GPU's own
time for the run from CUDA events, which tells whether an idle gap costs on the CPU side or the GPU's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from client.bench_common import (
    BATCH,
    add_point_arguments,
    aligned,
    measure_point,
    report_of,
    serving,
    write_report,
)
from client.load import Workload
from triton_ort.harness.server import exit_on_termination
from triton_ort.harness.transport import STAGES


def run_rounds(args: argparse.Namespace) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{served: {concurrency: [one point per round]}}, rounds interleaved, the order rotated each round."""
    served = [args.model + variant for variant in args.variants]
    work = Workload.build(args.model, args.repository, BATCH[args.model])
    points: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in served}
    with serving(args.repository, served, mps=args.mps) as server:
        for round_ in range(args.rounds):
            order = served[round_ % len(served) :] + served[: round_ % len(served)]
            for name in order:
                for concurrency in args.concurrency:
                    point = measure_point(
                        server.grpc_url, name, work, concurrency, args, args.repository / name
                    )
                    points[name].setdefault(str(concurrency), []).append(point)
                    print(
                        f"round {round_ + 1} {name} c={concurrency}: p50 {point['p50_us']:.0f} us, "
                        f"{point['requests_per_s']:.0f} req/s",
                        file=sys.stderr,
                        flush=True,
                    )
    return points


CLOCK_COLUMNS = (
    ("execute_us", "execute us"),
    ("execute_p50_us", "execute p50"),
    ("outside_us", "outside us"),
    ("gc_us", "gc us"),
    ("bind_us", "bind us"),
    ("ort_run_us", "ort run us"),
)


def summary(points: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """One row per variant and concurrency; `_timed` variants add their stub clock (µs per execute, mean of
    the rounds): inside execute() (mean and median) and outside it (the rest of compute_infer), the stub's
    garbage collection, and for ours the library's binding and ORT's run."""
    header = ["served", "c", "p50 us (median)", "p50 spread", "req/s (median)", *STAGES, "req/exec"]
    timed = any("stub_clock" in r for rounds in points.values() for rs in rounds.values() for r in rs)
    if timed:
        header += [label for _, label in CLOCK_COLUMNS]
    rows = []
    for name, by_concurrency in points.items():
        for concurrency, rounds in by_concurrency.items():
            p50s = [r["p50_us"] for r in rounds]
            rates = [r["requests_per_s"] for r in rounds]
            stages = [statistics.mean(r["stages_us"][s] for r in rounds) for s in STAGES]
            per_execute = statistics.mean(r["requests_per_execute"] for r in rounds)
            rows.append(
                [
                    name,
                    concurrency,
                    f"{statistics.median(p50s):.0f}",
                    f"{min(p50s):.0f}-{max(p50s):.0f}",
                    f"{statistics.median(rates):.0f}",
                    *(f"{s:.0f}" for s in stages),
                    f"{per_execute:.1f}",
                ]
            )
            if timed:
                clocks = [r["stub_clock"] for r in rounds if "stub_clock" in r]
                rows[-1] += [
                    f"{statistics.mean(c[key] for c in clocks):.0f}" if clocks and key in clocks[0] else "-"
                    for key, _ in CLOCK_COLUMNS
                ]
    return aligned(header, rows, numbers=range(1, len(header)))


def idle_probe(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """In-process runs of the model (our runner, its plan reused, as served) after each kind of gap: p50
    of the wall time (host clock, stream synchronised) and of the GPU's time (CUDA events on the stream)."""
    from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

    onnx_path = args.repository / args.model / "1" / "model.onnx"
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(create_session(onnx_path, ModelOptions(), placement), placement)
    spec = runner.inputs[0]
    inner = [int(d) for d in spec.shape[1:] if d is not None]
    x = torch.randn(BATCH[args.model], *inner, device=runner.device)
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def spin(seconds: float) -> None:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass

    gaps = {"back-to-back": None, "1ms-sleep": lambda: time.sleep(1e-3), "1ms-spin": lambda: spin(1e-3)}
    results = {}
    with torch.cuda.stream(stream):
        for name, gap in gaps.items():
            walls: list[float] = []
            gpus: list[float] = []
            until = time.perf_counter() + args.seconds
            while time.perf_counter() < until or len(walls) < 50:
                if gap:
                    gap()
                t0 = time.perf_counter()
                runner.reclaim_outputs()
                start.record(stream)
                runner.run({spec.name: x})
                end.record(stream)
                stream.synchronize()
                walls.append(time.perf_counter() - t0)
                gpus.append(start.elapsed_time(end) * 1e-3)
            results[name] = {
                "wall_p50_us": float(np.median(walls) * 1e6),
                "gpu_p50_us": float(np.median(gpus) * 1e6),
                "runs": len(walls),
            }
    return results


def main() -> None:
    exit_on_termination()  # a stopped probe still stops the server it started
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="demo", choices=sorted(BATCH))
    parser.add_argument(
        "--variants", nargs="+", default=["", "_naive", "_null_host", "_null_kernel", "_plain"]
    )
    add_point_arguments(parser)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-probe", action="store_true", help="instead: in-process runs after idle gaps")
    parser.add_argument(
        "--mps",
        action="store_true",
        help="serve under CUDA MPS (the server and its stubs; this client stays outside, as a user's does)",
    )
    parser.add_argument("--label", default="", help="a word for the JSON (e.g. the server's setting)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = report_of("client.ab", label=args.label)
    if args.idle_probe:
        report["idle_probe"] = idle_probe(args)
        text = "\n".join(
            f"{gap}: wall {r['wall_p50_us']:.0f} us, GPU {r['gpu_p50_us']:.0f} us ({r['runs']} runs)"
            for gap, r in report["idle_probe"].items()
        )
    else:
        report["points"] = run_rounds(args)
        text = summary(report["points"])
    if args.json:
        write_report(args.json, report)
    print(f"{args.label} {args.model}".strip())
    print(text)


if __name__ == "__main__":
    main()
