"""Benchmark our model against its anchors, in one run: latency percentiles, throughput, Triton's
per-stage times, JSON results and a ratio table.

    python -m client.bench --models demo mlp4096 --out results/bench-gpu.json        # GPU host
    python -m client.bench --models demo mlp1024 --out results/bench-cpu.json        # CPU only

Anchors, measured in the same run on the same batch (the served ones are client/anchors/):
  floor    in-process ORT IO binding on torch tensors (no server at all)
  ours     model_repository's model.py behind tritonserver (CUDA shared memory on GPUs, numpy over gRPC)
  null     zeros without ORT behind the same tritonserver: the python backend's own floor (null-host; on
           a GPU also null-device and null-kernel)
  plain    the simplest zero-copy model.py a user would write (GPU hosts)
  naive    the tutorial model (as_numpy -> session.run -> numpy) behind the same tritonserver
  pytriton nvidia-pytriton serving the same ORT IO-binding function (numpy over gRPC; it has no GPU path)
  native   Triton's native onnxruntime backend on the same file, by a server of its own, where the host
           has that backend (--native-backend; skipped with one line elsewhere)

The load generator is closed-loop: at concurrency 1 one synchronous gRPC client (as perf_analyzer's
default); above it asyncio over tritonclient's grpc.aio, `concurrency` requests in flight, each worker
sending its next request as soon as its previous answer arrives. The Triton SDK image's
perf_analyzer measures the same thing:
  perf_analyzer -m demo -i grpc -u 127.0.0.1:8001 -b 100 --concurrency-range 1:16:3 \
      --shared-memory cuda --output-shared-memory-size 800
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tritonclient.grpc as grpcclient

try:
    from tqdm import tqdm
except ImportError:  # a host with a preinstalled stack and no package index: no progress line there
    tqdm = None

from client.bench_common import (
    BATCH,
    NGC_NATIVE_BACKEND,
    ROOT,
    add_native_backend_argument,
    aligned,
    execute_steps,
    host_environment,
    native_backend_folder,
    serving,
    sync_load,
    transport_for_ours,
    write_report,
)
from client.load import Workload, load_in_processes, request_workers
from triton_ort.harness.reference import compare
from triton_ort.harness.releases import Release, server_release
from triton_ort.harness.server import exit_on_termination
from triton_ort.harness.transport import STAGES, ModelStatistics


@dataclass
class Measurement:
    model: str
    anchor: str
    transport: str
    concurrency: int
    batch: int
    requests: int
    p50_us: float
    p95_us: float
    p99_us: float
    requests_per_s: float
    stages_us: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_latencies(cls, latencies: list[float], requests_per_s: float, **labels: Any) -> Measurement:
        micros = np.array(latencies) * 1e6
        p50, p95, p99 = (float(np.percentile(micros, q)) for q in (50, 95, 99))
        return cls(
            requests=len(latencies),
            p50_us=p50,
            p95_us=p95,
            p99_us=p99,
            requests_per_s=requests_per_s,
            **labels,
        )


_STARTED = time.perf_counter()
_progress_bar: list[tqdm[Any]] = []  # the run's one progress line, made by the first measurement


def _progress(text: str) -> None:
    """The measurement now running: on one tqdm line on a terminal; when stderr is a file or a pipe, one
    plain line per measurement instead (a log or CI then shows the run moving, minutes per model, with no
    terminal codes in it), and stdout keeps the tables only."""
    if tqdm is None or not sys.stderr.isatty():
        # the seconds since start: a host's log then shows which part of a run took the time
        print(f"{time.perf_counter() - _STARTED:6.0f} s  measuring {text}", file=sys.stderr, flush=True)
        return
    if not _progress_bar:
        _progress_bar.append(
            tqdm(desc="measuring", unit=" points", file=sys.stderr, disable=None, leave=False)
        )
    _progress_bar[0].set_postfix_str(text, refresh=False)
    _progress_bar[0].update()


def _note(text: str) -> None:
    """A line on stderr that does not break the progress line."""
    if tqdm is None:
        print(text, file=sys.stderr)
    else:
        tqdm.write(text, file=sys.stderr)


def measure_floor(
    onnx_path: Path,
    model: str,
    batch: int,
    args: argparse.Namespace,
    idle_s: float = 0.0,
    host_input: str = "",
) -> Measurement:
    """In-process ORT IO binding on torch tensors: the physical floor for this model and batch. Each run
    is an execute of its own (reclaim_outputs), as served: the signature's prepared plan, reused.

    With idle_s, the loop sleeps between runs as a server at concurrency 1 does between requests, which
    shows what an idle GPU (clocks, launch latency) adds to one run on its own. With host_input ('pinned'
    or 'pageable'), the input starts in host memory, as numpy requests arrive, and is staged that way."""
    from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

    gpu = torch.cuda.is_available()
    stream = torch.cuda.Stream() if gpu else None  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream) if stream else Placement("cpu")
    session = create_session(onnx_path, ModelOptions(), placement)
    runner = IOBindingRunner(session, placement, pinned_staging=host_input == "pinned")
    spec = runner.inputs[0]
    inner = [int(d) for d in spec.shape[1:] if d is not None]  # the bench models have fixed inner axes
    x = torch.randn(batch, *inner, device="cpu" if host_input else runner.device)
    context = torch.cuda.stream(stream) if stream else contextlib.nullcontext()
    latencies: list[float] = []
    with context:
        deadline = time.perf_counter() + args.warmup
        while time.perf_counter() < deadline:
            runner.reclaim_outputs()
            runner.run({spec.name: x})
        started = time.perf_counter()
        deadline = started + args.duration
        while time.perf_counter() < deadline or len(latencies) < args.min_requests:
            t0 = time.perf_counter()
            runner.reclaim_outputs()
            runner.run({spec.name: x})
            if stream:
                stream.synchronize()
            latencies.append(time.perf_counter() - t0)
            if idle_s:
                time.sleep(idle_s)
        wall = time.perf_counter() - started
    del runner
    anchor = f"floor+{idle_s * 1e3:g}ms-idle" if idle_s else f"floor-{host_input}" if host_input else "floor"
    return Measurement.from_latencies(
        latencies,
        len(latencies) / wall,
        model=model,
        anchor=anchor,
        transport="in-process",
        concurrency=1,
        batch=batch,
    )


def measure_server(
    url: str,
    model: str,
    served_name: str,
    anchor: str,
    transport: str,
    concurrency: int,
    work: Workload,
    args: argparse.Namespace,
    stats: bool = True,
    check: bool = True,
) -> Measurement:
    client = grpcclient.InferenceServerClient(url)
    label = f"{model} {anchor} {transport} c={concurrency}"
    _progress(label)
    with request_workers(client, served_name, transport, work, 1) as (workers, ask):
        got = ask()
        problems = compare(got, work.reference, rtol=args.rtol, atol=args.atol) if check else []
        if problems:
            raise SystemExit(f"{label}: WRONG ANSWER: {problems}")
        before = ModelStatistics.read(client, served_name) if stats else None
        if concurrency == 1:
            latencies, wall = sync_load(client, served_name, workers[0], args)
            rate = len(latencies) / wall
    if concurrency > 1:
        timing = (args.warmup, args.duration)
        latencies, rate = load_in_processes(
            url, served_name, transport, work, concurrency, args.client_processes, timing
        )
    stages = ModelStatistics.read(client, served_name).stage_us(before) if before else {}
    return Measurement.from_latencies(
        latencies,
        rate,
        model=model,
        anchor=anchor,
        transport=transport,
        concurrency=concurrency,
        batch=work.batch,
        stages_us=stages,
    )


@contextlib.contextmanager
def pytriton_server(onnx_path: Path, name: str) -> Iterator[str]:
    """PyTriton serving the same function in a child process. Its log and its workspace (model store,
    sockets) live in a temporary folder that is removed afterwards, whatever happened."""
    from triton_ort.harness.server import free_ports

    ports = free_ports(3)
    # Short names: the workspace holds PyTriton's unix sockets, whose paths must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="pytriton_") as folder:
        command = [
            sys.executable,
            "-m",
            "client.anchors.pytriton_server",
            "--onnx",
            str(onnx_path),
            "--name",
            name,
            "--http-port",
            str(ports[0]),
            "--grpc-port",
            str(ports[1]),
            "--metrics-port",
            str(ports[2]),
            "--workspace",
            str(Path(folder) / "ws"),
        ]
        log_path = Path(folder) / "pytriton.log"
        # As for our server: the stub must load this Python's libpython, not another 3.X found first by ld.so.
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(
            filter(None, [sysconfig.get_config_var("LIBDIR"), env.get("LD_LIBRARY_PATH")])
        )
        with open(log_path, "w+b") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
            try:
                deadline = time.monotonic() + 180
                while True:
                    with contextlib.suppress(Exception):
                        if client.is_model_ready(name):
                            break
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        tail = log.read().decode(errors="replace")[-3000:]
                        raise RuntimeError(f"PyTriton did not start: {tail}")
                    time.sleep(0.5)
                yield f"127.0.0.1:{ports[1]}"
            finally:
                # SIGINT is what PyTriton's serve() stops on cleanly: it stops its tritonserver and
                # cleans the workspace (pytriton/triton.py, Triton.serve)
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def auto_placement(work: Workload) -> str:
    """Where output_placement 'auto' puts this workload's outputs with the default crossover."""
    from triton_ort import ModelOptions

    if not torch.cuda.is_available():
        return "host"
    return "host" if work.output_bytes <= ModelOptions().host_output_max_bytes else "device"


def profile_executes(repository: Path, models: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Per-step medians (µs) of our code inside the real stub at c=1 (the library's execute records), from
    a second server with debug logging on, so that the logging's cost stays out of the main measurements.
    On a GPU, for each output placement too."""
    suffixes = ["", "_host", "_device"] if torch.cuda.is_available() else [""]
    served = [model + suffix for model in models for suffix in suffixes]
    profiles: dict[str, Any] = {}
    with serving(repository, served, log_verbose=1, env={"TRITON_ORT_LOG_LEVEL": "DEBUG"}) as server:
        for name in served:
            model = next(m for m in models if name.startswith(m))
            work = Workload.build(model, repository, args.batch or BATCH[model])
            start = len(server.log())
            measure_server(server.grpc_url, model, name, "ours", transport_for_ours(), 1, work, args, False)
            profiles[name] = execute_steps(server.log()[start:])
    return profiles


def bench_model(
    model: str, server_url: str, repository: Path, args: argparse.Namespace, release: Release
) -> list[Measurement]:
    work = Workload.build(model, repository, args.batch or BATCH[model])
    gpu = torch.cuda.is_available()
    transport = transport_for_ours()
    top = max(args.concurrency)
    results = [
        measure_floor(work.onnx_path, model, work.batch, args),
        measure_floor(work.onnx_path, model, work.batch, args, 1e-3),
    ]
    if gpu:  # what a numpy request's host-to-device staging costs, each way
        results += [
            measure_floor(work.onnx_path, model, work.batch, args, host_input=h)
            for h in ("pageable", "pinned")
        ]

    def run(served: str, anchor: str, mode: str, concurrency: int, check: bool = True) -> Measurement:
        return measure_server(server_url, model, served, anchor, mode, concurrency, work, args, check=check)

    for concurrency in args.concurrency:
        results.append(run(model, "ours", transport, concurrency))
    # the transport floor: zeros from the host or the device; on a GPU also after one kernel there
    nulls = ["host", "device", "kernel"] if gpu else ["host"]
    for placement in nulls:
        for concurrency in (1, top):
            results.append(
                run(f"{model}_null_{placement}", f"null-{placement}", transport, concurrency, False)
            )
    if gpu:
        for placement in ("host", "device"):
            results.append(run(f"{model}_{placement}", f"ours-{placement}", transport, 1))
        for concurrency in (1, top):
            results.append(run(f"{model}_plain", "plain", transport, concurrency))
        results.append(run(model, "ours", "numpy", 1))
        both = (1, top)
        results += measure_apart(
            "CUDA graphs", model, repository, work, args, {"_graph": ("ours-graph", both)}
        )
        if args.mps:
            # the server and its stubs as MPS clients; the load-generating client stays outside, as a user's
            under_mps = {
                "": ("ours-mps", both),
                "_naive": ("naive-mps", both),
                "_null_host": ("null-host-mps", both),
                "_null_kernel": ("null-kernel-mps", (1,)),
            }
            results += measure_apart("MPS", model, repository, work, args, under_mps, mps=True)
    for concurrency in (1, top):
        results.append(run(f"{model}_naive", "naive", transport, concurrency))
    results += measure_inflight(model, repository, work, args, release)
    results += measure_native(model, repository, work, args)
    if not args.skip_pytriton:
        with pytriton_server(work.onnx_path, f"{model}_pytriton") as url:
            for concurrency in (1, top):
                results.append(
                    measure_server(
                        url, model, f"{model}_pytriton", "pytriton", "numpy", concurrency, work, args, False
                    )
                )
    return results


Anchors = dict[str, tuple[str, tuple[int, ...]]]
"""Served-name suffix -> (anchor, the concurrencies it is measured at)."""


def measure_native(
    model: str, repository: Path, work: Workload, args: argparse.Namespace
) -> list[Measurement]:
    """Triton's native onnxruntime backend on the same ONNX file (`<model>_native`), by a server of its own
    that has the backend's folder (--native-backend; NGC's images have it at NGC_NATIVE_BACKEND); where
    there is none, one line says so and nothing is measured."""
    folder = native_backend_folder(args.native_backend)
    if folder is None:
        _note(
            f"{model}: native onnxruntime backend: skipped, this host has none (give its folder with "
            f"--native-backend DIR; NGC's tritonserver images have it at {NGC_NATIVE_BACKEND})"
        )
        return []
    anchors: Anchors = {"_native": ("native", (1, max(args.concurrency)))}
    return measure_apart(
        "the native onnxruntime backend",
        model,
        repository,
        work,
        args,
        anchors,
        transport=transport_for_ours(),
        backends={"onnxruntime": folder},
    )


def measure_apart(
    what: str,
    model: str,
    repository: Path,
    work: Workload,
    args: argparse.Namespace,
    anchors: Anchors,
    transport: str = "cuda-shm",
    **serving_options: Any,
) -> list[Measurement]:
    """Anchors served by a server of their own (the opt-in CUDA graphs; the server under CUDA MPS): one
    that cannot run there (a model that cannot be captured, a host where MPS does not start) is reported
    and does not take the main measurements down with it."""
    results = []
    try:
        with serving(repository, [model + suffix for suffix in anchors], **serving_options) as server:
            for suffix, (anchor, concurrencies) in anchors.items():
                for concurrency in concurrencies:
                    results.append(
                        measure_server(
                            server.grpc_url,
                            model,
                            model + suffix,
                            anchor,
                            transport,
                            concurrency,
                            work,
                            args,
                            check="_null_" not in suffix,  # the null models answer zeros
                        )
                    )
    except Exception as error:  # reported, and the rest of the run goes on
        _note(f"{model}: {what} could not be measured: {str(error)[-2000:]}")
    return results


def measure_inflight(
    model: str, repository: Path, work: Workload, args: argparse.Namespace, release: Release
) -> list[Measurement]:
    """One instance keeping requests in flight on K lanes (`ours-inflight<K>`), in a server of its own,
    where the release lets a model that is not decoupled answer after execute returns (2.47 and later);
    on an earlier one each would be measured as a classic instance under another name, so none is."""
    if not release.answers_through_response_sender:
        _note(f"{model}: in flight not measured: this Triton release has no response sender for it")
        return []
    prefix = model + "_inflight"  # the variants scripts/build_models.py writes: <model>_inflight<K>
    lanes = sorted(int(d.name.removeprefix(prefix)) for d in repository.glob(prefix + "*"))
    both = (1, max(args.concurrency))
    anchors: Anchors = {f"_inflight{k}": (f"ours-inflight{k}", both) for k in lanes}
    return measure_apart("in flight", model, repository, work, args, anchors, transport_for_ours())


def tuned_variant(repository: Path, model: str, tuned_config: Path) -> str:
    """`triton-ort tune`'s config (config.tuned.pbtxt) as one more sweep variant, MODEL_tuned, serving the
    same version folders as MODEL (linked, not copied): its pick measured by the sweep's own load, in the
    same run as the grid it is judged against."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(tuned_config.read_text(), model_config_pb2.ModelConfig())
    name = f"{model}_tuned"
    config.name = name
    folder = repository / name
    folder.mkdir(exist_ok=True)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    for version in (repository / model).iterdir():
        if version.is_dir() and version.name.isdigit() and not (folder / version.name).exists():
            (folder / version.name).symlink_to(version.resolve(), target_is_directory=True)
    return name


def sweep_summary(results: list[Measurement]) -> dict[str, Any]:
    """Per model, the median req/s of each variant over the rounds, the best of the grid, and the tuned
    variant against it."""
    summary: dict[str, Any] = {}
    for model in dict.fromkeys(m.model for m in results):
        rates: dict[str, list[float]] = {}
        for m in results:
            if m.model == model:
                rates.setdefault(m.anchor, []).append(m.requests_per_s)
        medians = {anchor: float(np.median(values)) for anchor, values in rates.items()}
        grid = {anchor: rate for anchor, rate in medians.items() if anchor != "tuned"}
        entry: dict[str, Any] = {"median_requests_per_s": medians}
        if grid:  # none where scripts/build_models.py --bench wrote no MODEL_i*_d* variants
            entry["best"] = best = max(grid, key=grid.__getitem__)
            if "tuned" in medians:
                entry["tuned_vs_best"] = medians["tuned"] / grid[best]
        summary[model] = entry
    return summary


def sweep(repository: Path, models: list[str], args: argparse.Namespace) -> list[Measurement]:
    """Throughput at the top concurrency for each instance count x queue delay (at concurrency 1 nothing
    gathers, and a queue delay only adds itself to the latency); with --tuned, tune's pick beside them;
    --rounds times, the variants interleaved in each round (a slow stretch of the host then touches each
    variant once, not one variant every time)."""
    results = []
    for model in models:
        work = Workload.build(model, repository, args.batch or BATCH[model])
        # the sweep's variants as scripts/build_models.py --bench wrote them: MODEL_i<instances>_d<delay µs>
        names = sorted(p.name for p in repository.glob(f"{model}_i*_d*") if p.is_dir())
        if args.tuned:
            names.append(tuned_variant(repository, model, args.tuned))
        with serving(repository, names) as server:
            for _round in range(args.rounds):
                for name in names:
                    measured = measure_server(
                        server.grpc_url,
                        model,
                        name,
                        name.removeprefix(model + "_"),
                        transport_for_ours(),
                        max(args.concurrency),
                        work,
                        args,
                    )
                    results.append(measured)
    return results


def crossover(
    repository: Path, model: str, batches: list[int], args: argparse.Namespace
) -> list[Measurement]:
    """p50 at c=1 with outputs forced to the host and to the device, over output sizes."""
    results = []
    with serving(repository, [f"{model}_host", f"{model}_device"]) as server:
        for batch in batches:
            work = Workload.build(model, repository, batch)
            for placement in ("host", "device"):
                served = f"{model}_{placement}"
                measured = measure_server(
                    server.grpc_url, model, served, f"ours-{placement}", transport_for_ours(), 1, work, args
                )
                results.append(measured)
    return results


def crossover_table(results: list[Measurement], repository: Path) -> str:
    rows = []
    for batch in sorted({m.batch for m in results}):
        host = _find(results, batch=batch, anchor="ours-host")
        device = _find(results, batch=batch, anchor="ours-device")
        if host and device:
            work_bytes = Workload.build(host.model, repository, batch).output_bytes
            faster = "host" if host.p50_us < device.p50_us else "device"
            rows.append([str(work_bytes), f"{host.p50_us:.0f}", f"{device.p50_us:.0f}", faster])
    header = ["output bytes/request", "host p50 us", "device p50 us", "faster"]
    return "\n" + aligned(header, rows, sep=" | ")


def _find(results: list[Measurement], **keys: Any) -> Measurement | None:
    return next((m for m in results if all(getattr(m, k) == v for k, v in keys.items())), None)


def ratio_table(results: list[Measurement], placements: dict[str, str]) -> str:
    """Ratios against the anchors of the same run, and what our code adds over the transport floor."""
    table: list[list[str]] = []
    for model in dict.fromkeys(m.model for m in results):
        ms = [m for m in results if m.model == model]
        transport = "cuda-shm" if _find(ms, anchor="ours", transport="cuda-shm") else "numpy"
        top = max(m.concurrency for m in ms)

        def get(
            anchor: str, c: int = 1, ms: list[Measurement] = ms, transport: str = transport
        ) -> Measurement | None:
            return _find(ms, anchor=anchor, transport=transport, concurrency=c)

        floor, idle = _find(ms, anchor="floor"), _find(ms, anchor="floor+1ms-idle")
        ours, ours_top = get("ours"), get("ours", top)
        lanes = sorted(
            {int(m.anchor.removeprefix("ours-inflight")) for m in ms if m.anchor.startswith("ours-inflight")}
        )
        py, py_top = (
            _find(ms, anchor="pytriton", concurrency=1),
            _find(ms, anchor="pytriton", concurrency=top),
        )
        quotients = [  # label, numerator, denominator, field
            (f"ours p50 / floor p50 ({transport}, c=1)", ours, floor, "p50_us"),
            ("ours p50 / naive p50 (c=1)", ours, get("naive"), "p50_us"),
            ("ours with CUDA graphs p50 / ours p50 (c=1)", get("ours-graph"), ours, "p50_us"),
            (
                f"ours with CUDA graphs / ours throughput (c={top})",
                get("ours-graph", top),
                ours_top,
                "requests_per_s",
            ),
            *(  # one in-flight instance of k lanes, against the shipped config and the native backend
                (f"in flight, {k} lanes{label}", get(f"ours-inflight{k}", c), other, field)
                for label, c, other, field in (
                    (", 1 instance p50 / ours p50 (c=1)", 1, ours, "p50_us"),
                    (f", 1 instance / ours throughput (c={top})", top, ours_top, "requests_per_s"),
                    (f" / native throughput (c={top})", top, get("native", top), "requests_per_s"),
                )
                for k in lanes
            ),
            ("native onnxruntime backend p50 / ours p50 (c=1)", get("native"), ours, "p50_us"),
            (f"ours / native throughput (c={top})", ours_top, get("native", top), "requests_per_s"),
            ("pytriton p50 / ours p50 (c=1)", py, ours, "p50_us"),
            (f"ours / pytriton throughput (c={top})", ours_top, py_top, "requests_per_s"),
            ("ours p50 / plain zero-copy model.py p50 (c=1)", ours, get("plain"), "p50_us"),
            (f"ours / plain throughput (c={top})", ours_top, get("plain", top), "requests_per_s"),
            # the python backend's floor for any model that computes on the GPU in the stub
            ("null-kernel p50 / naive p50 (c=1)", get("null-kernel"), get("naive"), "p50_us"),
            ("under MPS: ours p50 / ours p50 without (c=1)", get("ours-mps"), ours, "p50_us"),
            (
                f"under MPS: ours / ours without throughput (c={top})",
                get("ours-mps", top),
                ours_top,
                "requests_per_s",
            ),
            ("under MPS: ours p50 / naive p50 (c=1)", get("ours-mps"), get("naive-mps"), "p50_us"),
            (
                f"under MPS: ours / null-host throughput (c={top})",
                get("ours-mps", top),
                get("null-host-mps", top),
                "requests_per_s",
            ),
        ]
        rows = [(label, f"{getattr(a, k) / getattr(b, k):.2f}x") for label, a, b, k in quotients if a and b]
        placement = placements.get(model, "host")
        for anchor in ("ours", f"ours-{placement}"):  # what our code adds over the transport floor
            ours_p, null = get(anchor), get(f"null-{placement}")
            if ours_p and null and floor and idle:
                rows.append(
                    (
                        f"{anchor} - null-{placement} p50 (c=1) vs floor+1ms-idle + 60 us",
                        f"{ours_p.p50_us - null.p50_us:.0f} us vs {idle.p50_us + 60:.0f} us "
                        f"(floor {floor.p50_us:.0f} us)",
                    )
                )
        for other in ("host", "device"):
            forced, null = get(f"ours-{other}"), get(f"null-{other}")
            if forced and null:
                rows.append(
                    (f"ours-{other} - null-{other} p50 (c=1)", f"{forced.p50_us - null.p50_us:.0f} us")
                )
        if floor and ours_top:  # in-process best: one run after another, 1 / floor p50 per second
            rows.append(
                (
                    f"ours throughput c={top} / in-process",
                    f"{ours_top.requests_per_s * floor.p50_us / 1e6:.2f}x",
                )
            )
        ceiling = get(f"null-{placement}", top) or get("null-host", top)
        if ceiling and ours_top:
            rows.append(
                (
                    f"client+server ceiling: {ceiling.anchor} throughput c={top}",
                    f"{ceiling.requests_per_s:.0f} req/s (ours {ours_top.requests_per_s:.0f})",
                )
            )
        table += [[model, name, value] for name, value in rows]
    return "\n" + aligned(["model", "measurement", "value"], table, sep=" | ")


def results_table(results: list[Measurement]) -> str:
    header = ["model", "anchor", "transport", "conc", "batch", "n", "p50 us", "p95 us", "p99 us", "req/s"]
    header.append("stages us (queue/in/infer/out)")
    rows = []
    for m in results:
        stages = "/".join(f"{m.stages_us[s]:.0f}" for s in STAGES) if m.stages_us else "-"
        numbers = [
            m.concurrency,
            m.batch,
            m.requests,
            f"{m.p50_us:.0f}",
            f"{m.p95_us:.0f}",
            f"{m.p99_us:.0f}",
        ]
        rows.append([m.model, m.anchor, m.transport, *map(str, numbers), f"{m.requests_per_s:.1f}", stages])
    return aligned(header, rows, numbers=range(3, 10))


def main() -> None:
    exit_on_termination()  # a stopped bench still stops the servers it started
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["demo"], choices=sorted(BATCH))
    parser.add_argument("--repository", type=Path, default=ROOT / "bench_repository")
    parser.add_argument("--batch", type=int, help="rows per request (default per model)")
    # The defaults fit one 10-minute command on the GPU test host for demo + mlp4096 (about 305 s there).
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--client-processes",
        type=int,
        default=max(1, min(8, (os.cpu_count() or 2) // 2)),
        help="load-generating processes above concurrency 1 (default: half the cores, at most 8)",
    )
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--min-requests", type=int, default=20)
    parser.add_argument("--skip-pytriton", action="store_true")
    add_native_backend_argument(parser, "to measure it beside ours")
    parser.add_argument(
        "--profile", action="store_true", help="also time our code per execute (debug server)"
    )
    parser.add_argument(
        "--mps", action="store_true", help="also measure ours, naive and the null models under CUDA MPS"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="instead: instance count x queue delay for each model"
    )
    parser.add_argument(
        "--tuned",
        type=Path,
        metavar="FILE",
        help="with --sweep: also measure this config (triton-ort tune's config.tuned.pbtxt) as MODEL_tuned",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --sweep: measure every variant this many times"
    )
    parser.add_argument(
        "--crossover",
        type=int,
        nargs="*",
        metavar="BATCH",
        help="instead: host vs device output placement at these batch sizes (default 8 32 128 512)",
    )
    parser.add_argument("--rtol", type=float, default=2e-3)
    parser.add_argument("--atol", type=float, default=2e-3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench.json")
    args = parser.parse_args()

    # the command as a user types it (sys.argv[0] is this file's absolute path on this machine)
    command = " ".join(["python -m client.bench", *sys.argv[1:]])
    report: dict[str, Any] = {"environment": host_environment(), "command": command}
    placements: dict[str, str] = {}
    if args.tuned and (not args.sweep or len(args.models) != 1):
        parser.error("--tuned FILE: with --sweep and one model (tune's config is that model's)")
    if args.sweep:
        results = sweep(args.repository, args.models, args)
        report["sweep"] = sweep_summary(results)
    elif args.crossover is not None:
        batches = args.crossover or [8, 32, 128, 512]
        results = [m for model in args.models for m in crossover(args.repository, model, batches, args)]
    else:
        results = []
        with serving(args.repository, _served_names(args.models)) as server:
            for model in args.models:
                placements[model] = auto_placement(Workload.build(model, args.repository, BATCH[model]))
                release = server_release(server.http_url)
                results += bench_model(model, server.grpc_url, args.repository, args, release)
                _note(f"\n{results_table([m for m in results if m.model == model])}")
                write_report(args.out, {**report, "results": [asdict(m) for m in results]})
        report["auto_output_placement"] = placements
        report["our_code_per_execute"] = (
            profile_executes(args.repository, args.models, args) if args.profile else {}
        )
    for bar in _progress_bar:
        bar.close()
    report["results"] = [asdict(m) for m in results]
    write_report(args.out, report)
    tables = [results_table(results)]
    for model, entry in report.get("sweep", {}).items():
        medians = entry["median_requests_per_s"]
        if "best" not in entry:
            continue
        best = entry["best"]
        line = f"{model}: best of the grid {best} {medians[best]:.0f} req/s (median of {args.rounds} rounds)"
        if "tuned_vs_best" in entry:
            line += f"; tuned {medians['tuned']:.0f} req/s, {entry['tuned_vs_best']:.3f}x the best"
        tables.append(line)
    if args.crossover is not None:
        tables.append(crossover_table(results, args.repository))
    if placements:
        tables.append(ratio_table(results, placements))
    for model, profile in report.get("our_code_per_execute", {}).items():
        steps = ", ".join(f"{k} {v:.0f}" for k, v in profile["steps_us_p50"].items())
        tables.append(f"{model}: our code per execute, p50 us at c=1 (debug server): {steps}")
    print(json.dumps(report["environment"]))
    print("\n".join(tables))
    print(f"\nresults: {args.out}")


def _served_names(models: list[str]) -> list[str]:
    gpu = torch.cuda.is_available()
    gpu_only = ["_null_device", "_null_kernel", "_plain", "_host", "_device"]
    suffixes = ["", "_naive", "_null_host", *(gpu_only if gpu else [])]
    return [model + suffix for model in models for suffix in suffixes]


if __name__ == "__main__":
    main()
