"""Benchmark our model against its anchors, in one run: latency percentiles, throughput, Triton's
per-stage times, JSON results and a ratio table.

    python -m client.bench --models demo mlp4096 --out results/bench-gpu.json        # GPU host
    python -m client.bench --models demo mlp1024 --out results/bench-cpu.json        # CPU only

Anchors, measured in the same run on the same batch:
  floor    in-process ORT IO binding on torch tensors (no server at all)
  ours     model_repository's model.py behind tritonserver (CUDA shared memory on GPUs, numpy over gRPC)
  naive    the tutorial model (as_numpy -> session.run -> numpy) behind the same tritonserver
  pytriton nvidia-pytriton serving the same ORT IO-binding function (numpy over gRPC; it has no GPU path)

The load generator is closed-loop: at concurrency 1 one synchronous gRPC client (as perf_analyzer's
default); above it asyncio over tritonclient's grpc.aio, `concurrency` requests in flight, each worker
sending its next request as soon as its previous answer arrives. The Triton SDK image's
perf_analyzer measures the same thing:
  perf_analyzer -m demo -i grpc -u 127.0.0.1:8001 -b 100 --concurrency-range 1:16:3 \
      --shared-memory cuda --output-shared-memory-size 800
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio

from client.triton_client import compare, reference_outputs

ROOT = Path(__file__).resolve().parent.parent
BATCH = {"demo": 100, "mlp1024": 256, "mlp4096": 1024}
STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


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
    def from_latencies(cls, latencies: list[float], wall_s: float, **labels: Any) -> Measurement:
        micros = np.array(latencies) * 1e6
        p50, p95, p99 = (float(np.percentile(micros, q)) for q in (50, 95, 99))
        return cls(
            requests=len(latencies),
            p50_us=p50,
            p95_us=p95,
            p99_us=p99,
            requests_per_s=len(latencies) / wall_s,
            **labels,
        )


def _progress(text: str) -> None:
    print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)


def measure_floor(
    onnx_path: Path,
    model: str,
    batch: int,
    args: argparse.Namespace,
    idle_s: float = 0.0,
    host_input: str = "",
) -> Measurement:
    """In-process ORT IO binding on torch tensors: the physical floor for this model and batch.

    With idle_s, the loop sleeps between runs as a server at concurrency 1 does between requests, which
    shows what an idle GPU (clocks, launch latency) adds to one run on its own. With host_input ('pinned'
    or 'pageable'), the input starts in host memory, as numpy requests arrive, and is staged that way."""
    from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

    gpu = torch.cuda.is_available()
    stream = torch.cuda.Stream() if gpu else None
    placement = Placement("cuda", 0, stream.cuda_stream) if stream else Placement("cpu")
    session = create_session(onnx_path, ModelOptions(), placement)
    runner = IOBindingRunner(session, placement, pinned_staging=host_input == "pinned")
    spec = runner.inputs[0]
    x = torch.randn(batch, *[int(d) for d in spec.shape[1:]], device="cpu" if host_input else runner.device)
    context = torch.cuda.stream(stream) if stream else contextlib.nullcontext()
    latencies: list[float] = []
    with context:
        deadline = time.perf_counter() + args.warmup
        while time.perf_counter() < deadline:
            runner.run({spec.name: x})
        started = time.perf_counter()
        deadline = started + args.duration
        while time.perf_counter() < deadline or len(latencies) < args.min_requests:
            t0 = time.perf_counter()
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
        latencies, wall, model=model, anchor=anchor, transport="in-process", concurrency=1, batch=batch
    )


def _stats(client: grpcclient.InferenceServerClient, model: str) -> dict[str, tuple[int, int]]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]["inference_stats"]
    return {stage: (int(stats[stage].get("count", 0)), int(stats[stage].get("ns", 0))) for stage in STAGES}


def _stage_deltas(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, float]:
    deltas = {}
    for stage in STAGES:
        count = after[stage][0] - before[stage][0]
        deltas[stage] = (after[stage][1] - before[stage][1]) / count / 1e3 if count else 0.0
    return deltas


async def _load(
    url: str, model: str, workers: list[tuple[list[Any], list[Any]]], args: argparse.Namespace, label: str
) -> tuple[list[float], float]:
    """Closed-loop load: one task per worker, each with its own request tensors."""
    client = grpcaio.InferenceServerClient(url)
    latencies: list[float] = []
    measuring = False

    async def worker(inputs: list[Any], outputs: list[Any], stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await client.infer(model, inputs, outputs=outputs)
            if measuring:
                latencies.append(time.perf_counter() - t0)

    try:
        warm_until = time.perf_counter() + args.warmup
        await asyncio.gather(*(worker(i, o, warm_until) for i, o in workers))
        measuring = True
        started = time.perf_counter()
        stop_at = started + args.duration
        tasks = [asyncio.create_task(worker(i, o, stop_at)) for i, o in workers]
        while not all(t.done() for t in tasks):
            await asyncio.sleep(0.25)
            _progress(f"{label}: {len(latencies)} requests")
        await asyncio.gather(*tasks)
        return latencies, time.perf_counter() - started
    finally:
        await client.close()


def _sync_load(
    client: grpcclient.InferenceServerClient,
    model: str,
    worker: tuple[list[Any], list[Any]],
    args: argparse.Namespace,
    label: str,
) -> tuple[list[float], float]:
    inputs, outputs = worker
    warm_until = time.perf_counter() + args.warmup
    while time.perf_counter() < warm_until:
        client.infer(model, inputs, outputs=outputs)
    latencies: list[float] = []
    started = time.perf_counter()
    stop_at = started + args.duration
    while time.perf_counter() < stop_at or len(latencies) < args.min_requests:
        t0 = time.perf_counter()
        client.infer(model, inputs, outputs=outputs)
        latencies.append(time.perf_counter() - t0)
        if len(latencies) % 200 == 0:
            _progress(f"{label}: {len(latencies)} requests")
    return latencies, time.perf_counter() - started


def _numpy_workers(inputs: dict[str, np.ndarray], outputs: list[str], concurrency: int) -> list[Any]:
    workers = []
    for _ in range(concurrency):
        items = []
        for name, array in inputs.items():
            item = grpcclient.InferInput(name, list(array.shape), "FP32")
            item.set_data_from_numpy(array)
            items.append(item)
        workers.append((items, [grpcclient.InferRequestedOutput(n) for n in outputs]))
    return workers


def measure_server(
    url: str,
    model: str,
    served_name: str,
    anchor: str,
    transport: str,
    concurrency: int,
    inputs: dict[str, np.ndarray],
    output_layout: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
    reference: dict[str, np.ndarray],
    args: argparse.Namespace,
    stats: bool = True,
) -> Measurement:
    client = grpcclient.InferenceServerClient(url)
    label = f"{model} {anchor} {transport} c={concurrency}"
    with contextlib.ExitStack() as stack:
        if transport == "cuda-shm":
            from client.cuda_shm import CudaShmIO

            regions = [
                stack.enter_context(CudaShmIO(client, served_name, inputs, output_layout))
                for _ in range(concurrency)
            ]
            regions[0].infer()
            got = regions[0].read_outputs()
            workers = [(r.infer_inputs, r.requested_outputs) for r in regions]
        else:
            workers = _numpy_workers(inputs, list(output_layout), concurrency)
            result = client.infer(served_name, workers[0][0], outputs=workers[0][1])
            got = {name: result.as_numpy(name) for name in output_layout}
        problems = compare(got, reference, rtol=args.rtol, atol=args.atol)
        if problems:
            raise SystemExit(f"{label}: WRONG ANSWER: {problems}")
        before = _stats(client, served_name) if stats else None
        if concurrency == 1:
            latencies, wall = _sync_load(client, served_name, workers[0], args, label)
        else:
            latencies, wall = asyncio.run(_load(url, served_name, workers, args, label))
        stages = _stage_deltas(before, _stats(client, served_name)) if before else {}
    _progress("")
    batch = next(iter(inputs.values())).shape[0]
    return Measurement.from_latencies(
        latencies,
        wall,
        model=model,
        anchor=anchor,
        transport=transport,
        concurrency=concurrency,
        batch=batch,
        stages_us=stages,
    )


@contextlib.contextmanager
def pytriton_server(onnx_path: Path, name: str) -> Iterator[str]:
    from triton_ort.local_server import free_port

    ports = [free_port() for _ in range(3)]
    command = [
        sys.executable,
        "-m",
        "client.bench_pytriton_server",
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
    ]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"pytriton_{name}.log", "w+b")  # noqa: SIM115
    # As for our server: the stub must load this Python's libpython, not another 3.X found first by ld.so.
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(
        filter(None, [sysconfig.get_config_var("LIBDIR"), env.get("LD_LIBRARY_PATH")])
    )
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
                raise RuntimeError(f"PyTriton did not start: {log.read().decode(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{ports[1]}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@dataclass
class Workload:
    """One model's request: its inputs, the expected answer, and the output layout for shared memory."""

    onnx_path: Path
    batch: int
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    layout: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]

    @classmethod
    def build(cls, model: str, repository: Path, batch: int) -> Workload:
        from onnxruntime import InferenceSession

        onnx_path = repository / model / "1" / "model.onnx"
        session = InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        spec, out = session.get_inputs()[0], session.get_outputs()[0]
        x = np.random.default_rng(0).standard_normal((batch, *spec.shape[1:])).astype(np.float32)
        inputs = {spec.name: x}
        layout = {out.name: (np.dtype(np.float32), (batch, *out.shape[1:]))}
        return cls(onnx_path, batch, inputs, reference_outputs(onnx_path, inputs), layout)


def transport_for_ours() -> str:
    return "cuda-shm" if torch.cuda.is_available() else "numpy"


def profile_executes(repository: Path, models: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Median time our code spends per execute() inside the real stub (the library's debug line), from a
    second server with debug logging on, so that the logging's cost stays out of the main measurements."""
    import re

    from triton_ort.local_server import LocalTritonServer

    medians = {}
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG"}
    with LocalTritonServer(repository, log_verbose=1, env=debug, cuda_memory_pool_bytes=2 << 30) as server:
        for model in models:
            work = Workload.build(model, repository, args.batch or BATCH[model])
            start = len(server.log())
            measure_server(
                server.grpc_url,
                model,
                model,
                "ours",
                transport_for_ours(),
                1,
                work.inputs,
                work.layout,
                work.reference,
                args,
                stats=False,
            )
            found = re.findall(r"copies, (\d+) us \(ORT run (\d+) us\)", server.log()[start:])
            times = np.array(found, dtype=float).reshape(-1, 2)
            medians[model] = float(np.median(times[:, 0])) if len(times) else float("nan")
            medians[f"{model} (ORT run)"] = float(np.median(times[:, 1])) if len(times) else float("nan")
    return medians


def bench_model(model: str, server_url: str, repository: Path, args: argparse.Namespace) -> list[Measurement]:
    work = Workload.build(model, repository, args.batch or BATCH[model])
    onnx_path, batch, inputs, reference, layout = (
        work.onnx_path,
        work.batch,
        work.inputs,
        work.reference,
        work.layout,
    )
    gpu = torch.cuda.is_available()
    transport = transport_for_ours()
    results = [
        measure_floor(onnx_path, model, batch, args),
        measure_floor(onnx_path, model, batch, args, 1e-3),
    ]
    if torch.cuda.is_available():  # what a numpy request's host-to-device staging costs, each way
        results += [
            measure_floor(onnx_path, model, batch, args, host_input=h) for h in ("pageable", "pinned")
        ]
    run = lambda name, anchor, mode, c: measure_server(  # noqa: E731
        server_url, model, name, anchor, mode, c, inputs, layout, reference, args
    )
    for concurrency in args.concurrency:
        results.append(run(model, "ours", transport, concurrency))
    results.append(run(f"{model}_x2", "ours-x2", transport, max(args.concurrency)))
    if gpu:
        results.append(run(model, "ours", "numpy", 1))
    for concurrency in (1, max(args.concurrency)):
        results.append(run(f"{model}_naive", "naive", transport, concurrency))
    if not args.skip_pytriton:
        with pytriton_server(onnx_path, f"{model}_pytriton") as url:
            for concurrency in (1, max(args.concurrency)):
                results.append(
                    measure_server(
                        url,
                        model,
                        f"{model}_pytriton",
                        "pytriton",
                        "numpy",
                        concurrency,
                        inputs,
                        layout,
                        reference,
                        args,
                        stats=False,
                    )
                )
    return results


def _find(results: list[Measurement], **keys: Any) -> Measurement | None:
    return next((m for m in results if all(getattr(m, k) == v for k, v in keys.items())), None)


def ratio_table(results: list[Measurement]) -> str:
    lines = ["", "model    | measurement                                   | value"]
    for model in dict.fromkeys(m.model for m in results):
        ms = [m for m in results if m.model == model]
        floor = _find(ms, anchor="floor")
        transport = "cuda-shm" if _find(ms, anchor="ours", transport="cuda-shm") else "numpy"
        ours1 = _find(ms, anchor="ours", transport=transport, concurrency=1)
        top = max(m.concurrency for m in ms)
        ours_top = _find(ms, anchor="ours", transport=transport, concurrency=top)
        naive1 = _find(ms, anchor="naive", concurrency=1)
        py1 = _find(ms, anchor="pytriton", concurrency=1)
        py_top = _find(ms, anchor="pytriton", concurrency=top)
        rows: list[tuple[str, str]] = []
        if floor and ours1:
            rows.append((f"ours p50 / floor p50 ({transport}, c=1)", f"{ours1.p50_us / floor.p50_us:.2f}x"))
            rows.append(("ours p50 - floor p50", f"{(ours1.p50_us - floor.p50_us) / 1e3:+.3f} ms"))
        if naive1 and ours1:
            rows.append(("naive p50 / ours p50 (c=1)", f"{naive1.p50_us / ours1.p50_us:.2f}x"))
        ours_x2 = _find(ms, anchor="ours-x2", concurrency=top)
        for label, served in (("ours", ours_top), ("ours 2 instances", ours_x2)):
            if floor and served:  # in-process best: one run after another, 1 / floor p50 per second
                throughput = served.requests_per_s * floor.p50_us / 1e6
                rows.append((f"{label} throughput c={top} / in-process", f"{throughput:.2f}x"))
        if py1 and ours1:
            rows.append(("pytriton p50 / ours p50 (c=1)", f"{py1.p50_us / ours1.p50_us:.2f}x"))
        if py_top and ours_top:
            rows.append(
                (
                    f"ours / pytriton throughput (c={top})",
                    f"{ours_top.requests_per_s / py_top.requests_per_s:.2f}x",
                )
            )
        lines += [f"{model:<8} | {name:<45} | {value}" for name, value in rows]
    return "\n".join(lines)


def results_table(results: list[Measurement]) -> str:
    header = (
        f"{'model':<8} {'anchor':<8} {'transport':<10} {'conc':>4} {'batch':>5} {'n':>6} {'p50 us':>9} "
        f"{'p95 us':>9} {'p99 us':>9} {'req/s':>8}  stages us (queue/in/infer/out)"
    )
    lines = [header]
    for m in results:
        stages = "/".join(f"{m.stages_us[s]:.0f}" for s in STAGES) if m.stages_us else "-"
        lines.append(
            f"{m.model:<8} {m.anchor:<8} {m.transport:<10} {m.concurrency:>4} {m.batch:>5} {m.requests:>6} "
            f"{m.p50_us:>9.0f} {m.p95_us:>9.0f} {m.p99_us:>9.0f} {m.requests_per_s:>8.1f}  {stages}"
        )
    return "\n".join(lines)


def environment() -> dict[str, str]:
    import onnxruntime

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": str(os.cpu_count()),
    }
    with contextlib.suppress(Exception):
        import importlib.metadata

        info["nvidia-pytriton"] = importlib.metadata.version("nvidia-pytriton")
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        with contextlib.suppress(Exception):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["demo"], choices=sorted(BATCH))
    parser.add_argument("--repository", type=Path, default=ROOT / "bench_repository")
    parser.add_argument("--url", help="gRPC URL of a running server on --repository (default: start one)")
    parser.add_argument("--batch", type=int, help="rows per request (default per model)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--duration", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--min-requests", type=int, default=20)
    parser.add_argument("--skip-pytriton", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="also time our code per execute (debug server)"
    )
    parser.add_argument("--rtol", type=float, default=2e-3)
    parser.add_argument("--atol", type=float, default=2e-3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench.json")
    args = parser.parse_args()

    results: list[Measurement] = []
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            from triton_ort.local_server import LocalTritonServer

            # 2 GiB of CUDA pool: 16 requests of the 4096-wide MLP carry 16 MiB in and out each.
            server = stack.enter_context(LocalTritonServer(args.repository, cuda_memory_pool_bytes=2 << 30))
            url = server.grpc_url
        for model in args.models:
            results += bench_model(model, url, args.repository, args)
            print(f"\n{results_table([m for m in results if m.model == model])}", file=sys.stderr)
    execute_us = profile_executes(args.repository, args.models, args) if args.profile else {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "environment": environment(),
        "command": " ".join(sys.argv),
        "results": [asdict(m) for m in results],
        "our_code_per_execute_us_p50": execute_us,
    }
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["environment"]))
    print(results_table(results))
    print(ratio_table(results))
    for model, micros in execute_us.items():
        print(f"{model:<8} | our code per execute (p50, c=1, debug server)   | {micros:.0f} us")
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
