"""`triton-ort perf`: latency and throughput of any model a Triton server serves, measured by Triton's own
perf_analyzer, with inputs that fit the model and its answers checked.

    triton-ort perf my_model                                   # HTTP, 127.0.0.1:8000, concurrency 1
    triton-ort perf my_model -i grpc --concurrency 1 2 4 8 16 --json perf.json --csv perf.csv --plot perf.svg
    triton-ort perf bert --shape input_ids:128 --shape attention_mask:128 -b 8   # open axes: say their size
    triton-ort perf my_model --input-data data.json            # perf_analyzer's JSON input data
    triton-ort perf my_model --shared-memory cuda              # GPU hosts: inputs and outputs in CUDA shm
    triton-ort perf my_model --compare-native                  # and my_model_native, served by "onnxruntime"

What is ours: the inputs (from the model's metadata and config: each input's type and shape, integers in
their range, open axes from --shape, strings; or --inputs FILE.npz, or --input-data FILE), written as
perf_analyzer's JSON input data; one answer checked against the model's metadata (each output's datatype,
shape and bytes) before the load and one after; --compare-native; the table, JSON, CSV and plot. What is
perf_analyzer's: the load (closed loop at each concurrency, or --request-rate), the windows and their
stability, the percentiles, shared memory and the server's stages (queue, compute input/infer/output). A
point that does not settle within --max-windows is measured once more over 3 windows and marked unstable.
Without perf_analyzer, perf says so in one line with the fix (make perf-analyzer).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from triton_ort.cli.args import DEFAULT_URLS, OneLineParser, host_port, one_line, positive
from triton_ort.cli.perf_analyzer import (
    PerfError,
    Point,
    Target,
    add_measurement_options,
    find_perf_analyzer,
    input_data,
    load_range,
    measure_point,
    resolve_shared_memory,
)
from triton_ort.cli.request_checks import (
    ModelSignature,
    RequestError,
    check_answer,
    expected_outputs,
    seen_outputs,
)
from triton_ort.cli.request_data import (
    build_requests,
    check_range_names,
    input_value_ranges,
    parse_ranges_option,
)
from triton_ort.harness.transport import (
    PROTOCOLS,
    STAGES,
    infer_inputs,
    make_client,
    model_config,
    model_metadata,
    tensor_metas,
)
from triton_ort.model.input_ranges import describe

NATIVE_SUFFIX = "_native"


def check_once(client: Any, target: Target, request: Mapping[str, NDArray[Any]]) -> None:
    """One request through tritonclient, its answer checked against the model's metadata."""
    module = PROTOCOLS["grpc"] if isinstance(client, PROTOCOLS["grpc"].InferenceServerClient) else None
    module = module or PROTOCOLS["http"]
    requested = [module.InferRequestedOutput(spec.name) for spec in target.expected]
    try:
        result = client.infer(target.name, infer_inputs(module, request), outputs=requested)
    except InferenceServerException as error:
        raise PerfError(f"model {target.name!r} refused a request: {one_line(error)}") from None
    problems = check_answer(target.expected, seen_outputs(result))
    if problems:
        raise PerfError(f"wrong answer from model {target.name!r}: {'; '.join(problems)}")


def measure(
    args: argparse.Namespace,
    client: Any,
    targets: Sequence[Target],
    requests: Sequence[Mapping[str, NDArray[Any]]],
    batch: int,
    batched: bool,
    levels: Sequence[float],
) -> list[Point]:
    """Every target at every load, one after the other at each (the same moment of the host): an answer
    checked before and after perf_analyzer's load; the sweep ends past --latency-threshold."""
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="triton-ort-perf-") as scratch:
        data = Path(scratch) / "input_data.json"
        data.write_text(json.dumps(input_data(requests, batched)))
        for level in levels:
            for target in targets:
                check_once(client, target, requests[0])
                points.append(measure_point(args, target, batch, level, data))
                check_once(client, target, requests[-1])
            ours = next(p for p in points[-len(targets) :] if p.model == targets[0].name)
            threshold = getattr(args, "latency_threshold", None)
            if threshold is not None and ours.latency_us > threshold * 1e3:
                what = f"p{ours.percentile:g}" if ours.percentile else "mean latency"
                print(
                    f"{ours.model} {ours.load}: {what} {ours.latency_us / 1e3:.3f} ms is above "
                    f"--latency-threshold {threshold:g} ms; the sweep ends here",
                    file=sys.stderr,
                )
                break
    return points


# --- the native backend beside ours ---------------------------------------------------------------------


def _index(client: Any) -> list[dict[str, Any]]:
    if isinstance(client, PROTOCOLS["grpc"].InferenceServerClient):
        reply = client.get_model_repository_index(as_json=True)
        return list(reply.get("models", [])) if isinstance(reply, dict) else []
    return list(client.get_model_repository_index())


def native_twin(client: Any, name: str) -> tuple[bool, bool, str]:
    """Whether the twin `name` (the same model.onnx with backend "onnxruntime") is ready to measure,
    whether this run loaded it (explicit model control: then it unloads it too), and otherwise the one
    line that says why it is skipped."""
    entry = next((e for e in _index(client) if e.get("name") == name), None)
    if entry is None:
        return (
            False,
            False,
            f"native onnxruntime backend: skipped, the server has no model {name!r} (serve your model.onnx "
            'under that name with backend: "onnxruntime" beside yours; docs/benchmarks.md)',
        )
    if entry.get("state") == "READY":
        return True, False, ""
    reason = str(entry.get("reason", ""))
    if not reason:  # in the repository, not loaded: explicit model control lets us load it
        try:
            client.load_model(name)
            return True, True, ""
        except InferenceServerException as error:
            entry = next((e for e in _index(client) if e.get("name") == name), {})
            reason = str(entry.get("reason", "")) or one_line(error)
    if "libtriton_onnxruntime" in reason or "backend" in reason.lower():
        return False, False, f"native onnxruntime backend: not installed on this server, skipped ({reason})"
    return False, False, f"native onnxruntime backend: model {name!r} is not ready, skipped ({reason})"


# --- reports ------------------------------------------------------------------------------------------


def table(points: Sequence[Point]) -> str:
    rated = any(p.request_rate is not None for p in points)
    header = [
        "model",
        "rate" if rated else "conc",
        "batch",
        "n",
        "infer/s",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
    ]
    chosen = next((p.percentile for p in points if p.percentile is not None), None)
    if chosen in (50, 90, 95, 99):  # already a column of its own
        chosen = None
    if chosen is not None:
        header.append(f"p{chosen:g} ms")
    gpu = any(p.gpu_utilization is not None for p in points)
    if gpu:
        header += ["gpu util %", "gpu MiB"]
    header += ["server us (queue/in/infer/out)", "stable"]
    rows = [
        [
            p.model,
            p.load.removeprefix("c="),
            str(p.batch),
            str(p.requests),
            f"{p.infer_per_s:.1f}",
            *(f"{v / 1e3:.3f}" for v in (p.p50_us, p.p90_us, p.p95_us, p.p99_us)),
            *([f"{p.latency_us / 1e3:.3f}"] if chosen is not None else []),
            *([f"{100 * (p.gpu_utilization or 0):.0f}", f"{p.gpu_memory_mib or 0:.0f}"] if gpu else []),
            "/".join(f"{p.server_us.get(s, 0.0):.0f}" for s in STAGES) if p.server_us else "-",
            "yes" if p.stable else "no",
        ]
        for p in points
    ]
    numeric = len(header) - 2
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(w) if 0 < i < numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, ["-" * w for w in widths], *rows)
    ]
    return "\n".join(lines)


def ratios(points: Sequence[Point], ours: str, native: str) -> list[str]:
    """native / ours at each load both were measured at."""
    lines = []
    for mine in (p for p in points if p.model == ours):
        theirs = next((p for p in points if p.model == native and p.load == mine.load), None)
        if theirs and mine.p50_us and mine.infer_per_s:
            lines.append(
                f"native onnxruntime / {ours} at {mine.load}: p50 {theirs.p50_us / mine.p50_us:.2f}x, "
                f"throughput {theirs.infer_per_s / mine.infer_per_s:.2f}x"
            )
    return lines


CSV_FIELDS = [
    *(f.name for f in Point.__dataclass_fields__.values() if f.name != "server_us"),
    *(f"server_{stage}_us" for stage in STAGES),
]


def write_reports(args: argparse.Namespace, report: dict[str, Any], points: Sequence[Point]) -> None:
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
            writer.writeheader()
            for point in points:
                row = {key: value for key, value in asdict(point).items() if key in CSV_FIELDS}
                writer.writerow(row | {f"server_{s}_us": point.server_us.get(s, "") for s in STAGES})
    if args.plot:
        from triton_ort.cli.perf_plot import svg_plot

        title = f"{args.model}: latency against throughput (batch {report['batch']}, {args.protocol})"
        args.plot.write_text(svg_plot(points, title))


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", nargs="?", help="the model's name on the server (or -m)")
    parser.add_argument(
        "-m", dest="model_option", metavar="MODEL", help="the same, as perf_analyzer takes it"
    )
    parser.add_argument(
        "-u", "--url", type=host_port, help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)"
    )
    parser.add_argument(
        "-b",
        "--batch-size",
        type=positive(int, "1 or more"),
        metavar="N",
        help="rows per request (default 1)",
    )
    sweep = parser.add_mutually_exclusive_group()
    sweep.add_argument(
        "--concurrency",
        type=positive(int, "1 or more"),
        nargs="+",
        metavar="N",
        help="requests in flight, one point each (default 1)",
    )
    sweep.add_argument(
        "--concurrency-range", type=load_range(int, 1), metavar="START:END[:STEP]", help="as perf_analyzer's"
    )
    sweep.add_argument(
        "--request-rate",
        type=positive(float, "requests per second above 0"),
        nargs="+",
        metavar="R",
        help="instead: open-loop load at these rates (requests/s), one point each",
    )
    sweep.add_argument(
        "--request-rate-range",
        type=load_range(float, 0),
        metavar="START:END[:STEP]",
        help="the same, as perf_analyzer's",
    )
    parser.add_argument(
        "--distribution",
        choices=["constant", "poisson"],
        default="constant",
        help="--request-rate's arrivals: evenly spaced (default) or Poisson",
    )
    parser.add_argument(
        "--inputs", type=Path, metavar="FILE.npz", help="real inputs by name, batch axis first"
    )
    parser.add_argument(
        "--string-data", metavar="TEXT", help="every string input element (default random words)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_measurement_options(parser, measurement_interval_ms=2000.0, max_windows=10)
    parser.add_argument(
        "--latency-threshold",
        type=positive(float, "milliseconds above 0"),
        metavar="MS",
        help="end the sweep after the first load whose latency (the mean, or --percentile's) is above it",
    )
    parser.add_argument(
        "--metrics-url",
        type=host_port,
        metavar="HOST:PORT",
        help="Triton's metrics endpoint: the server's GPU utilisation and memory per point (perf_analyzer's "
        "--collect-metrics)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every point as JSON")
    parser.add_argument("--csv", "-f", type=Path, metavar="FILE", help="write every point as CSV")
    parser.add_argument("--plot", type=Path, metavar="FILE.svg", help="latency against throughput (SVG)")
    parser.add_argument(
        "--compare-native",
        action="store_true",
        help=f"also measure MODEL{NATIVE_SUFFIX}: the same model.onnx served by Triton's onnxruntime backend",
    )
    parser.add_argument(
        "--native-model", metavar="NAME", help=f"the native model's name (default MODEL{NATIVE_SUFFIX})"
    )
    return parser


# --- the command ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    client = make_client(args.protocol, args.url)
    metadata = model_metadata(client, args.model)
    config = model_config(client, args.model)
    signature = ModelSignature.from_config(config)
    datatypes = {meta.name: meta.datatype for meta in tensor_metas(metadata, "inputs")}
    overrides = parse_ranges_option(args.range)
    check_range_names(overrides, list(datatypes))
    ranges = input_value_ranges(datatypes, config, overrides)
    if args.verbose:
        for line in describe(ranges):
            print(line, file=sys.stderr)
    requests, batch = build_requests(
        signature, metadata, args.batch_size, args.shape, args.inputs, args.string_data, args.seed,
        input_data=args.input_data, ranges=ranges,
    )  # fmt: skip
    batched = signature.max_batch_size > 0
    left_out = tuple(
        meta.name
        for meta in tensor_metas(metadata, "inputs")
        if meta.name in signature.optional_inputs and meta.name not in requests[0]
    )
    targets = [Target(args.model, expected_outputs(metadata, batch, batched), left_out)]
    native = args.native_model or f"{args.model}{NATIVE_SUFFIX}"
    loaded = False
    if args.compare_native:
        ready, loaded, why = native_twin(client, native)
        if ready:
            outputs = expected_outputs(model_metadata(client, native), batch, batched)
            targets.append(Target(native, outputs, left_out))
        else:
            print(why, file=sys.stderr)
    try:
        points = measure(
            args, client, targets, requests, batch, batched, args.request_rate or args.concurrency
        )
    finally:
        if loaded:
            with contextlib.suppress(InferenceServerException):
                client.unload_model(native)
    print(table(points))
    compared = ratios(points, args.model, native) if len(targets) > 1 else []
    for line in compared:
        print(line)
    report = {
        "model": args.model,
        "protocol": args.protocol,
        "url": args.url,
        "engine": "perf_analyzer",
        "transport": {"none": "numpy", "cuda": "cuda-shm", "system": "system-shm"}[args.shared_memory],
        "batch": batch,
        "inputs": {name: f"{array.dtype}{list(array.shape)}" for name, array in requests[0].items()},
        "requests_in_data": len(requests),
        "measurement_interval_ms": args.measurement_interval,
        "stability_percentage": args.stability_percentage,
        "max_windows": args.max_windows,
        "native": native if len(targets) > 1 else None,
        "points": [asdict(point) for point in points],
        "ratios": compared,
    }
    write_reports(args, report, points)
    return 0


def main(argv: list[str] | None = None, prog: str = "triton-ort perf") -> None:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.model and args.model_option and args.model != args.model_option:
        parser.error(f"two models: {args.model!r} and -m {args.model_option!r}; give one")
    args.model = args.model or args.model_option
    if not args.model:
        parser.error("no model: give its name (triton-ort perf MODEL, or -m MODEL)")
    resolve_shared_memory(parser, args)
    args.request_rate = args.request_rate or args.request_rate_range
    args.concurrency = args.concurrency or args.concurrency_range or [1]
    args.url = args.url or DEFAULT_URLS[args.protocol]
    if args.plot and args.plot.suffix.lower() != ".svg":
        parser.error(f"--plot {args.plot}: the plot is an SVG file; name it with .svg")
    binary, why = find_perf_analyzer()
    if binary is None:
        parser.exit(1, f"{parser.prog}: error: {why}\n")
    try:
        sys.exit(run(args))
    except RequestError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except PerfError as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    except (InferenceServerException, OSError) as error:
        parser.exit(1, f"{parser.prog}: error: {args.protocol} {args.url}: {one_line(error)}\n")


if __name__ == "__main__":
    main()
