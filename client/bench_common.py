"""What the benchmark (client.bench) and the diagnostics (diagnostics/) share: the models' batch sizes, the
served-model harness, the one-client load loop, memory readings, the host description, tables and JSON
reports. They import from here, never from each other or from scripts/."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc as grpcclient

from client.load import Worker, Workload, load_in_processes, request_workers
from triton_ort.harness.processes import MIB, MemorySnapshot, gpu_memory_by_pid, stub_processes
from triton_ort.harness.reference import compare
from triton_ort.harness.server import NGC_BACKEND_DIRECTORY
from triton_ort.harness.transport import ModelStatistics

ROOT = Path(__file__).resolve().parent.parent
DEMO_ONNX = ROOT / "model_repository" / "demo" / "1" / "model.onnx"
"""The demo's ONNX file, as `make models` builds it."""
BATCH = {"demo": 100, "mlp1024": 256, "mlp4096": 1024}
"""Rows per request of each benchmarked model (scripts/build_models.py --bench builds the models)."""


def aligned(
    header: Sequence[str], rows: Sequence[Sequence[str]], numbers: range = range(0), sep: str = "  "
) -> str:
    """A text table whose columns are as wide as their widest cell: the columns in `numbers`
    right-aligned, the others left-aligned; a dashed line under the header."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return sep.join(
            cell.rjust(width) if i in numbers else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def sync_load(
    client: grpcclient.InferenceServerClient,
    model: str,
    worker: Worker,
    args: argparse.Namespace,
) -> tuple[list[float], float]:
    """One synchronous client sending the worker's requests in turn: args.warmup seconds unmeasured, then
    requests for args.duration seconds (at least args.min_requests); (each request's latency in s, the
    measured wall time in s)."""
    turns = itertools.cycle(worker)
    warm_until = time.perf_counter() + args.warmup
    while time.perf_counter() < warm_until:
        inputs, outputs = next(turns)
        client.infer(model, inputs, outputs=outputs)
    latencies: list[float] = []
    started = time.perf_counter()
    stop_at = started + args.duration
    while time.perf_counter() < stop_at or len(latencies) < args.min_requests:
        inputs, outputs = next(turns)
        t0 = time.perf_counter()
        client.infer(model, inputs, outputs=outputs)
        latencies.append(time.perf_counter() - t0)
    return latencies, time.perf_counter() - started


Agreement = Callable[[dict[str, Any], dict[str, Any]], list[str]]
"""An answer and the reference in, what disagrees out ([] when the answer is right)."""


def close_to_reference(answer: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    return compare(answer, reference, rtol=2e-3, atol=2e-3)


def check_answer(
    served: str, work: Workload, ask: Callable[..., dict[str, Any]], agree: Agreement = close_to_reference
) -> None:
    """Each of the workload's requests answered once and checked against its reference (ORT on the CPU)
    before anything is timed (null models answer zeros: sent, not checked); a wrong one ends the
    benchmark."""
    for k, request in enumerate(work.requests):
        if "_null_" in served:
            ask(k)
        elif problems := agree(ask(k), request.reference):
            what = f" (request {k} of {len(work.requests)})" if work.others else ""
            raise SystemExit(f"{served}: WRONG ANSWER{what}: {problems}")


def measure_point(
    url: str,
    served: str,
    work: Workload,
    concurrency: int,
    args: argparse.Namespace,
    agree: Agreement = close_to_reference,
) -> dict[str, Any]:
    """One served point after an answer check (null models answer zeros: not checked): p50, p99, rate,
    Triton's stages and requests per execute over `args.seconds`, at concurrency 1 from this process and
    above it from `args.client_processes` load processes (client.load)."""
    client = grpcclient.InferenceServerClient(url)
    transport = transport_for_ours()
    with request_workers(client, served, transport, work, 1) as (workers, ask):
        check_answer(served, work, ask, agree)
        before = ModelStatistics.read(client, served)
        if concurrency == 1:
            timing = argparse.Namespace(warmup=args.warmup, duration=args.seconds, min_requests=20)
            latencies, wall = sync_load(client, served, workers[0], timing)
            rate = len(latencies) / wall
    if concurrency > 1:
        latencies, rate = load_in_processes(
            url, served, transport, work, concurrency, args.client_processes, (args.warmup, args.seconds)
        )
    after = ModelStatistics.read(client, served)
    executes = after.executions - before.executions
    point = {
        "p50_us": float(np.percentile(np.array(latencies) * 1e6, 50)),
        "p99_us": float(np.percentile(np.array(latencies) * 1e6, 99)),
        "requests_per_s": rate,
        "stages_us": after.stage_us(before),
        "requests_per_execute": (after.requests - before.requests) / max(executes, 1),
    }
    return point


def add_point_arguments(
    parser: argparse.ArgumentParser, client_processes: int = 4, warmup: float = 0.3
) -> None:
    """What measure_point reads from a served benchmark's arguments, and the repository it serves."""
    parser.add_argument("--repository", type=Path, default=ROOT / "bench_repository")
    parser.add_argument("--client-processes", type=int, default=client_processes)
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=warmup)


NGC_NATIVE_BACKEND = NGC_BACKEND_DIRECTORY / "onnxruntime"
"""Where NGC's tritonserver images keep the native onnxruntime backend."""
NATIVE_LIBRARY = "libtriton_onnxruntime.so"


def native_backend_folder(given: Path | None) -> Path | None:
    """The native onnxruntime backend's folder: the one given, else NGC's where it holds the backend's
    library (the project's stand-in image has the folder without it); None where there is none."""
    if given is not None:
        return given
    return NGC_NATIVE_BACKEND if (NGC_NATIVE_BACKEND / NATIVE_LIBRARY).is_file() else None


def add_native_backend_argument(parser: argparse.ArgumentParser, purpose: str) -> None:
    """--native-backend DIR, which native_backend_folder reads."""
    parser.add_argument(
        "--native-backend",
        type=Path,
        metavar="DIR",
        help=f"the folder of Triton's native onnxruntime backend ({NATIVE_LIBRARY}), built for this "
        f"tritonserver's release, {purpose} (default: {NGC_NATIVE_BACKEND} where it holds that library)",
    )


def execute_steps(log_text: str) -> dict[str, Any]:
    """Our code's executes in a debug server's log (the library's execute records): how many, how many
    answered from host memory, and each step's median (µs)."""
    from triton_ort.runtime.stats import ExecuteStats

    records = ExecuteStats.from_log(log_text)
    steps = sorted({step for record in records for step in record.steps_us})
    return {
        "executes": len(records),
        "outputs_on_host": sum(r.outputs_on_host for r in records),
        "steps_us_p50": {
            step: float(np.median([r.steps_us.get(step, 0.0) for r in records])) for step in steps
        },
    }


def report_of(module: str, **content: Any) -> dict[str, Any]:
    """A benchmark's JSON report: the host, the command as run (`python -m module ...`), then `content`."""
    return {
        "environment": host_environment(),
        "command": " ".join([f"python -m {module}", *sys.argv[1:]]),
        **content,
    }


def device_used_mib() -> float | None:
    """The GPU's memory in use (nvidia-smi), None without a GPU."""
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return float(text.strip() or "nan")


def hold_cuda_context() -> None:
    """Create this measuring process's own CUDA context now, where there is a GPU: its first CUDA-shm
    request would create it (538 MiB on an H200) between a point's two readings of the GPU's use, and that
    point would count it (the first point of the instances run of 2026-12-02 did)."""
    import torch  # here, not above: diagnostics.bench_memory's CPU stages import this module without it

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")


def settled_device_used_mib(timeout_s: float = 20.0) -> float | None:
    """The GPU's memory in use once it stops falling: a server that just stopped gives its memory back
    over a few seconds, and a reading taken meanwhile counts it as the next point's."""
    previous = device_used_mib()
    deadline = time.monotonic() + timeout_s
    while previous is not None and time.monotonic() < deadline:
        time.sleep(1.0)
        now = device_used_mib()
        if now is None or now >= previous:
            return now
        previous = now
    return previous


def transport_for_ours() -> str:
    """CUDA shared memory where this Python sees a GPU (through torch), else numpy over gRPC."""
    try:
        import torch
    except ImportError:  # a client without torch (diagnostics.inflight_floor's Python 3.12 venv)
        return "numpy"
    return "cuda-shm" if torch.cuda.is_available() else "numpy"


def serving(
    repository: Path, models: list[str], extra_args: Sequence[str] = (), **kwargs: Any
) -> contextlib.AbstractContextManager[Any]:
    """Our tritonserver with only `models` loaded (the repository also holds the sweep's variants), and
    `extra_args` for tritonserver. 2 GiB of CUDA pool: 16 requests of the 4096-wide MLP carry 16 MiB in and
    out each."""
    from triton_ort.harness.server import LocalTritonServer

    loads = [f"--load-model={name}" for name in models]
    return LocalTritonServer(
        repository,
        cuda_memory_pool_bytes=2 << 30,
        extra_args=["--model-control-mode=explicit", *loads, *extra_args],
        startup_timeout_s=600,
        **kwargs,
    )


def cpu_model() -> str:
    """The CPU's name as /proc/cpuinfo gives it (platform.processor() says only x86_64 on Linux)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    return platform.processor() or platform.machine()


def host_environment() -> dict[str, str]:
    """The machine and stack a measurement ran on, for every benchmark's JSON. `cores`: the CPUs this
    process may use (its affinity), which is what the measurement had, not the machine's count."""
    import onnxruntime

    try:
        import torch
    except ImportError:  # a client without torch (diagnostics.inflight_floor's Python 3.12 venv)
        torch = None  # type: ignore[assignment]

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__ if torch is not None else "not installed",
        "onnxruntime": onnxruntime.__version__,
        "cpu": cpu_model(),
        "cores": str(len(os.sched_getaffinity(0))),
    }
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        info["nvidia-pytriton"] = importlib.metadata.version("nvidia-pytriton")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
    return info


def write_report(path: Path, report: dict[str, Any]) -> None:
    """A measurement's JSON, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def linear_onnx(path: Path) -> Path:
    """logits[b, 2] = x[b, 2010] @ W: the demo's signature with almost no compute (the in-process
    benches' short model, whose own jitter does not hide a few microseconds)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from triton_ort.model.onnx_files import save_model

    weights = np.random.default_rng(0).standard_normal((2010, 2)).astype(np.float32) / 45
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["np_script_embeddings", "w"], ["np_logits"])],
        "linear",
        [helper.make_tensor_value_info("np_script_embeddings", TensorProto.FLOAT, ["batch", 2010])],
        [helper.make_tensor_value_info("np_logits", TensorProto.FLOAT, ["batch", 2])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    # pinned IR: the GPU host's onnx writes IR 14 by default, which its ORT 1.31.1 does not read
    return save_model(graph, path)


MPS_SERVER = "nvidia-cuda-mps-server"


def _mps_server_gpu_mib() -> float:
    """GPU memory of the MPS server processes (under --mps the clients' shared context lives there)."""
    by_pid = gpu_memory_by_pid() or {}
    mps = [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == MPS_SERVER]
    return sum(by_pid.get(pid, 0) for pid in mps) / MIB


def memory_reading(server_pid: int, mps: bool) -> dict[str, Any]:
    snapshot = MemorySnapshot.of(server_pid)
    stubs = sorted(stub_processes(server_pid))
    gpu = snapshot.gpu  # None where nvidia-smi cannot read (no GPU)
    reading: dict[str, Any] = {
        "server_rss_mib": snapshot.rss.get(server_pid, 0) / MIB,
        "server_gpu_mib": None if gpu is None else gpu.get(server_pid, 0) / MIB,
        "stub_rss_mib": [snapshot.rss.get(pid, 0) / MIB for pid in stubs],
        "stub_gpu_mib": [] if gpu is None else [gpu.get(pid, 0) / MIB for pid in stubs],
    }
    if mps:
        reading["mps_server_gpu_mib"] = _mps_server_gpu_mib()
    return reading
