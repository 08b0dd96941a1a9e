"""`triton-ort tune MODEL_DIR`: model-analyzer's job for this backend. It serves the model under candidate
configs, each on a server of its own, measures each as perf does (through Triton's perf_analyzer) at your
batch sizes and concurrencies, ranks them by throughput within a latency budget, reports every candidate, and
writes the winner as config.tuned.pbtxt beside the model (--write: as config.pbtxt, the old one kept as
config.pbtxt.bak).

    triton-ort tune my_repository/my_model --batch 8 --concurrency 1 16 --latency-budget-ms 20
    triton-ort tune my_repository/bert --shape input_ids:128 --shape attention_mask:128 --max-minutes 5

The search tries every pair of instance count (1, 2, 4) and the dynamic batcher's max_queue_delay (0, 100,
500 µs), which interact; then, on GPU instances, one lever at a time from the best so far (a full grid would
take hours): CUDA graphs (on, off), output placement (auto, device, host; only where a request's outputs
exceed host_output_max_bytes) and, where the host has it, CUDA MPS. A candidate whose model does not load
is reported with the reason and the search goes on. The score is the mean throughput (infer/s) at the
highest concurrency over the batch sizes; a candidate fits the budget when every point's latency (the
mean, or --percentile's) is within it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from triton_ort.cli import perf, perf_analyzer
from triton_ort.cli.args import positive
from triton_ort.cli.config import completed_config
from triton_ort.cli.perf_analyzer import find_perf_analyzer
from triton_ort.cli.request_checks import ModelSignature, RequestError, expected_outputs
from triton_ort.cli.request_data import (
    build_requests,
    check_range_names,
    input_value_ranges,
    parse_ranges_option,
)
from triton_ort.errors import ConfigError
from triton_ort.harness.checks import ServerStartError
from triton_ort.harness.processes import MIB, MemorySnapshot
from triton_ort.harness.repository import read_config
from triton_ort.harness.server import LocalTritonServer, exit_on_termination, gpu_present
from triton_ort.harness.transport import make_client, model_config, model_metadata, tensor_metas
from triton_ort.model.input_ranges import PARAMETER as INPUT_RANGES
from triton_ort.model.input_ranges import parse_ranges
from triton_ort.model.options import DEFAULT_HOST_OUTPUT_MAX_BYTES, parse_bool

INSTANCES = (1, 2, 4)
QUEUE_DELAYS_US = (0, 100, 500)
PLACEMENTS = ("auto", "device", "host")
# --levers: the name a user gives -> the Candidate field it moves
LEVERS = {
    "instances": "instances",
    "queue-delay": "queue_delay_us",
    "cuda-graphs": "cuda_graphs",
    "output-placement": "output_placement",
    "mps": "mps",
}


GRAPHS_PARAMETER = "cuda_graph"
"""The parameter that, like optimization.cuda.graphs, turns CUDA graphs on (triton_ort.model.options)."""


def graphs_in(config: model_config_pb2.ModelConfig) -> bool:
    """Whether the config runs CUDA graphs, read where it says so."""
    if GRAPHS_PARAMETER in config.parameters:
        raw = config.parameters[GRAPHS_PARAMETER].string_value
        try:
            return parse_bool(f"parameter {GRAPHS_PARAMETER}", raw)
        except ConfigError as error:  # the model's own load would refuse it too
            raise RequestError(f"config.pbtxt: {error}") from None
    return bool(config.optimization.cuda.graphs)


def set_graphs(config: model_config_pb2.ModelConfig, on: bool) -> None:
    """CUDA graphs on or off where the config sets them: the backend refuses the parameter and the field
    together."""
    if GRAPHS_PARAMETER in config.parameters:
        config.parameters[GRAPHS_PARAMETER].string_value = str(on).lower()
    else:
        config.optimization.cuda.graphs = on


@dataclass(frozen=True)
class Candidate:
    """One config to measure: the levers tune moves (None: as the config has it)."""

    instances: int
    queue_delay_us: int
    cuda_graphs: bool | None = None
    output_placement: str | None = None
    mps: bool = False

    def label(self) -> str:
        parts = [f"{self.instances} inst", f"delay {self.queue_delay_us} us"]
        if self.cuda_graphs is not None:
            parts.append(f"graphs {'on' if self.cuda_graphs else 'off'}")
        if self.output_placement is not None:
            parts.append(f"placement {self.output_placement}")
        if self.mps:
            parts.append("MPS")
        return ", ".join(parts)

    def apply(self, config: model_config_pb2.ModelConfig) -> model_config_pb2.ModelConfig:
        """The config with this candidate's levers set (a copy)."""
        tuned = model_config_pb2.ModelConfig()
        tuned.CopyFrom(config)
        if not tuned.instance_group:
            tuned.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_AUTO)
        for group in tuned.instance_group:
            group.count = self.instances
        if tuned.max_batch_size > 0 and not tuned.HasField("sequence_batching"):
            tuned.dynamic_batching.max_queue_delay_microseconds = self.queue_delay_us
        if self.cuda_graphs is not None:
            set_graphs(tuned, self.cuda_graphs)
        if self.output_placement is not None:
            tuned.parameters["output_placement"].string_value = self.output_placement
        return tuned


@dataclass
class Result:
    candidate: Candidate
    points: list[perf_analyzer.Point] = field(default_factory=list)
    gpu_mib: float | None = None
    rss_mib: float = 0.0
    error: str | None = None

    @property
    def score(self) -> float:
        """Mean infer/s at the highest concurrency measured, over the batch sizes."""
        if not self.points:
            return 0.0
        top = max(p.concurrency for p in self.points)
        rates = [p.infer_per_s for p in self.points if p.concurrency == top]
        return sum(rates) / len(rates)

    def fits(self, budget_ms: float | None) -> bool:
        if self.error is not None or not self.points:
            return False
        return budget_ms is None or all(p.latency_us <= budget_ms * 1e3 for p in self.points)


def winner(results: Sequence[Result], budget_ms: float | None) -> Result | None:
    fitting = [r for r in results if r.fits(budget_ms)]
    return max(fitting, key=lambda r: r.score) if fitting else None


def _serving_repository(model_dir: Path, config: model_config_pb2.ModelConfig, root: Path) -> Path:
    """A repository holding only the candidate: its config, and links to the model's version folders (the
    files are not copied)."""
    repository = root / "repository"
    folder = repository / str(config.name)
    folder.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.name != "config.pbtxt" and not item.name.startswith("config."):
            (folder / item.name).symlink_to(item.resolve())
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    return repository


def _perf_args(args: argparse.Namespace, server: LocalTritonServer) -> argparse.Namespace:
    """tune's options (perf's measurement options among them: perf_analyzer.add_measurement_options) with this
    server's addresses."""
    return argparse.Namespace(
        **{
            **vars(args),
            "url": server.grpc_url if args.protocol == "grpc" else server.http_url,
            "metrics_url": f"127.0.0.1:{server.metrics_port}" if gpu_present() else None,
            "request_rate": None,
            "latency_threshold": None,
        }
    )


def _output_bytes(metadata: dict[str, Any], batch: int, batched: bool) -> int:
    total = 0
    for meta in tensor_metas(metadata, "outputs"):
        if meta.datatype == "BYTES":
            continue
        dims = [batch if (i == 0 and batched) else max(d, 1) for i, d in enumerate(meta.shape)]
        total += int(np.prod(dims)) * np.dtype(triton_to_np_dtype(meta.datatype)).itemsize
    return total


def measure(
    model_dir: Path, config: model_config_pb2.ModelConfig, candidate: Candidate, args: argparse.Namespace
) -> tuple[Result, int]:
    """Serve the model under `candidate` and measure it; the result, and a request's output bytes at the
    largest batch (for the placement stage)."""
    result = Result(candidate)
    output_bytes = 0
    with tempfile.TemporaryDirectory(prefix="triton-ort-tune-") as scratch:
        repository = _serving_repository(model_dir, candidate.apply(config), Path(scratch))
        try:
            server = LocalTritonServer(
                repository, mps=candidate.mps, startup_timeout_s=args.startup_timeout
            ).start()
        except ServerStartError as error:
            result.error = f"did not load: {str(error).strip().splitlines()[0]}"
            return result, output_bytes
        try:
            assert server.process is not None
            client = make_client(
                args.protocol, server.grpc_url if args.protocol == "grpc" else server.http_url
            )
            metadata = model_metadata(client, config.name)
            served = model_config(client, config.name)
            signature = ModelSignature.from_config(served)
            perf_args = _perf_args(args, server)
            batched = signature.max_batch_size > 0
            datatypes = {m.name: m.datatype for m in tensor_metas(metadata, "inputs")}
            overrides = parse_ranges_option(args.range)
            check_range_names(overrides, list(datatypes))
            ranges = input_value_ranges(datatypes, served, overrides, graph_ranges(model_dir))
            for batch in args.batch:
                requests, batch = build_requests(
                    signature, metadata, batch if batched else None, args.shape, None, None, 0,
                    input_data=args.input_data, ranges=ranges, data_options="--input-data FILE",
                )  # fmt: skip
                output_bytes = max(output_bytes, _output_bytes(metadata, batch, batched))
                left_out = tuple(
                    m.name
                    for m in tensor_metas(metadata, "inputs")
                    if m.name in signature.optional_inputs and m.name not in requests[0]
                )
                outputs = expected_outputs(metadata, batch, batched)
                target = perf_analyzer.Target(config.name, outputs, left_out)
                result.points += perf.measure(
                    perf_args, client, [target], requests, batch, batched, args.concurrency
                )
            snapshot = MemorySnapshot.of(server.process.pid)
            result.rss_mib = snapshot.rss_total / MIB
            result.gpu_mib = None if snapshot.gpu_total is None else snapshot.gpu_total / MIB
        except perf_analyzer.PerfError as error:
            result.error = str(error)
        # A RequestError (open axes nothing sizes, a --range the input cannot take) is the request data's,
        # the same under every candidate: it ends the search in one line (main), the server stopped first.
        finally:
            server.stop()
    return result, output_bytes


def stages(args: argparse.Namespace, gpu: bool) -> list[tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    """The stages in the order tried, of the levers --levers names: (Candidate fields, the values to try,
    a tuple each). Instances and queue delay go together, every pair: they interact (more instances
    batch less unless a request waits for the next; on the demo Model Analyzer's best pair, 4 instances
    with 100 µs, was one that moving one lever at a time never tried). The GPU levers follow one at a
    time, from the best so far."""
    chosen = {LEVERS[name] for name in getattr(args, "levers", LEVERS)}
    grid = [("instances", args.instances), ("queue_delay_us", args.queue_delays)]
    grid = [(field, values) for field, values in grid if field in chosen]
    found: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = []
    if grid:
        fields = tuple(field for field, _ in grid)
        found.append((fields, list(itertools.product(*(values for _, values in grid)))))
    levers: list[tuple[str, Any]] = []
    if gpu:
        levers.append(("cuda_graphs", (True, False)))
        levers.append(("output_placement", PLACEMENTS))
        if shutil.which("nvidia-cuda-mps-control"):
            levers.append(("mps", (False, True)))
    found += [((field,), [(value,) for value in values]) for field, values in levers if field in chosen]
    return found


def offline_config(model_dir: Path) -> model_config_pb2.ModelConfig | None:
    """The folder's config as the server's auto-complete would make it (`triton-ort config`), read offline;
    None where it cannot be (ConfigCommandError, a folder without its ONNX file): the load says why."""
    try:
        return completed_config(model_dir)[0]
    except Exception:
        return None


def graph_ranges(model_dir: Path) -> dict[str, tuple[float, float]]:
    """What the model's ONNX file says its integer inputs take (the tables they index), as `triton-ort
    config` prints it: Triton does not serve what auto-complete adds, and tune has the folder. {} where the
    folder cannot be completed offline."""
    completed = offline_config(model_dir)
    if completed is None or INPUT_RANGES not in completed.parameters:
        return {}
    return parse_ranges(completed.parameters[INPUT_RANGES].string_value)


def tuning_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    """The model's config as written, with the max_batch_size the server's auto-complete gives it where the
    file leaves it out (the three-line config): the queue delay is a lever, and is written, only for a
    model that batches. As written where the folder cannot be completed offline (the load says why)."""
    config = read_config(model_dir)
    completed = offline_config(model_dir) if config.max_batch_size == 0 else None
    if completed is not None:
        config.max_batch_size = completed.max_batch_size
    return config


def check_ranges_offline(model_dir: Path, args: argparse.Namespace) -> None:
    """A --range naming no input of the model, refused before any server starts (as infer and perf refuse
    it); where the folder cannot be completed offline, the first candidate's served config checks it."""
    completed = offline_config(model_dir)
    if completed is not None:
        overrides = parse_ranges_option(getattr(args, "range", None) or [])
        check_range_names(overrides, [t.name for t in completed.input])


def search(model_dir: Path, args: argparse.Namespace, report: Any = print) -> list[Result]:
    check_ranges_offline(model_dir, args)
    config = tuning_config(model_dir)
    config.name = config.name or model_dir.name
    gpu = gpu_present() and not any(g.kind == g.KIND_CPU for g in config.instance_group)
    # Where the config sets a lever the first candidate keeps it, so that trying it again is no new candidate.
    placement = (
        config.parameters["output_placement"].string_value
        if "output_placement" in config.parameters
        else "auto"
    )
    best = Candidate(
        args.instances[0],
        args.queue_delays[0],
        cuda_graphs=graphs_in(config) if gpu else None,
        output_placement=placement if gpu else None,
    )
    results: dict[Candidate, Result] = {}
    deadline = time.monotonic() + args.max_minutes * 60
    output_bytes = 0
    skipped = 0
    for fields, values in stages(args, gpu):
        if fields == ("output_placement",) and output_bytes <= DEFAULT_HOST_OUTPUT_MAX_BYTES:
            continue  # small outputs: placement auto already puts them on the host
        for value in values:
            candidate = replace(best, **dict(zip(fields, value, strict=True)))
            if candidate in results:
                continue
            if time.monotonic() > deadline:
                skipped += 1
                continue
            report(f"tune: {candidate.label()} ...")
            result, seen_bytes = measure(model_dir, config, candidate, args)
            output_bytes = max(output_bytes, seen_bytes)
            results[candidate] = result
            report(f"tune: {candidate.label()}: " + (result.error or f"{result.score:.1f} infer/s"))
        chosen = winner(list(results.values()), args.latency_budget_ms)
        if chosen is not None:
            best = chosen.candidate
    if skipped:
        report(f"tune: --max-minutes {args.max_minutes:g} reached; {skipped} candidate(s) not tried")
    return list(results.values())


def table(results: Sequence[Result], budget_ms: float | None, percentile: float | None) -> str:
    what = f"p{percentile:g}" if percentile else "mean"
    header = ["candidate", "infer/s", f"worst {what} ms", "GPU MiB", "RSS MiB", "fits budget"]
    rows = []
    for r in sorted(results, key=lambda r: -r.score):
        if r.error is not None:
            rows.append([r.candidate.label(), "-", "-", "-", "-", r.error[:100]])
            continue
        worst = max(p.latency_us for p in r.points) / 1e3
        gpu = "-" if r.gpu_mib is None else f"{r.gpu_mib:.0f}"
        fits = "yes" if r.fits(budget_ms) else "no"
        rows.append([r.candidate.label(), f"{r.score:.1f}", f"{worst:.3f}", gpu, f"{r.rss_mib:.0f}", fits])
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, ["-" * w for w in widths], *rows)
    )


def write_winner(model_dir: Path, chosen: Candidate, replace_config: bool) -> Path:
    """config.tuned.pbtxt beside the model; with `replace_config`, config.pbtxt itself (the old one kept
    as config.pbtxt.bak)."""
    config = tuning_config(model_dir)
    text = text_format.MessageToString(chosen.apply(config))
    tuned = model_dir / "config.tuned.pbtxt"
    tuned.write_text(f"# triton-ort tune: {chosen.label()}\n{text}")
    if not replace_config:
        return tuned
    shutil.copy2(model_dir / "config.pbtxt", model_dir / "config.pbtxt.bak")
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir / "config.pbtxt"


def _microseconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole microseconds, 0 or more")
    return value


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir", type=Path, help="the model folder: config.pbtxt and its version folders")
    parser.add_argument(
        "--batch",
        "-b",
        type=positive(int, "1 or more"),
        nargs="+",
        default=[1],
        metavar="N",
        help="batch sizes to measure (default 1)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive(int, "1 or more"),
        nargs="+",
        default=[1, 8],
        metavar="N",
        help="concurrencies to measure (default 1 8); the highest one scores",
    )
    parser.add_argument(
        "--latency-budget-ms",
        type=positive(float, "milliseconds above 0"),
        metavar="MS",
        help="a candidate fits when every point's latency is within it (default: no budget)",
    )
    parser.add_argument(
        "--instances",
        type=positive(int, "1 or more"),
        nargs="+",
        default=list(INSTANCES),
        metavar="N",
        help="instance counts to try (default 1 2 4)",
    )
    parser.add_argument(
        "--queue-delays",
        type=_microseconds,
        nargs="+",
        default=list(QUEUE_DELAYS_US),
        metavar="US",
        help="max_queue_delay_microseconds values to try (default 0 100 500)",
    )
    parser.add_argument(
        "--max-minutes",
        type=positive(float, "minutes above 0"),
        default=20.0,
        metavar="M",
        help="no candidate starts after this (default 20)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=positive(float, "seconds above 0"),
        default=300.0,
        metavar="S",
        help="how long one candidate's server may take to load (default 300 s)",
    )
    parser.add_argument(
        "--levers",
        nargs="+",
        choices=list(LEVERS),
        default=list(LEVERS),
        help="the levers to move (default all; the GPU ones only for GPU instances, mps only where the "
        "host has it)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="replace config.pbtxt with the winner (the old one kept as config.pbtxt.bak)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="every candidate and its points as JSON")
    parser.add_argument(
        "--plot", type=Path, metavar="FILE.svg", help="each candidate's latency against throughput (SVG)"
    )
    perf_analyzer.add_measurement_options(parser, measurement_interval_ms=1000.0, max_windows=6)
    return parser


def main(argv: list[str] | None = None, prog: str = "triton-ort tune") -> None:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not (args.model_dir / "config.pbtxt").is_file():
        parser.error(
            f"{args.model_dir}: no config.pbtxt; give a model folder (config.pbtxt and 1/model.onnx)"
        )
    if args.plot and args.plot.suffix.lower() != ".svg":
        parser.error(f"--plot {args.plot}: the plot is an SVG file; name it with .svg")
    perf_analyzer.resolve_shared_memory(parser, args)
    if find_perf_analyzer()[0] is None:
        parser.exit(1, f"{parser.prog}: error: {find_perf_analyzer()[1]}\n")
    args.concurrency = sorted(set(args.concurrency))
    exit_on_termination()  # SIGTERM unwinds: the candidate's server is stopped on the way out
    try:
        results = search(args.model_dir, args, report=lambda line: print(line, file=sys.stderr, flush=True))
    except RequestError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(table(results, args.latency_budget_ms, args.percentile))
    chosen = winner(results, args.latency_budget_ms)
    if args.json:
        args.json.write_text(json.dumps([_as_json(r) for r in results], indent=2) + "\n")
    if args.plot:
        from triton_ort.cli.perf_plot import svg_plot

        points = [replace(p, model=r.candidate.label()) for r in results for p in r.points]
        args.plot.write_text(
            svg_plot(points, f"{args.model_dir.name}: candidates, latency against throughput")
        )
    if chosen is None:
        budget = f" within {args.latency_budget_ms:g} ms" if args.latency_budget_ms else ""
        parser.exit(1, f"{parser.prog}: no candidate served the model{budget}; nothing written\n")
    written = write_winner(args.model_dir, chosen.candidate, args.write)
    print(f"winner: {chosen.candidate.label()} ({chosen.score:.1f} infer/s); written to {written}")


def _as_json(result: Result) -> dict[str, Any]:
    return {
        "candidate": result.candidate.label(),
        "levers": {key: value for key, value in vars(result.candidate).items()},
        "score_infer_per_s": result.score,
        "gpu_mib": result.gpu_mib,
        "rss_mib": result.rss_mib,
        "error": result.error,
        "points": [vars(p) for p in result.points],
    }
