"""Where one execute()'s time goes inside the real python-backend stub, sampled with py-spy.

    python -m client.profile_stub --models demo --json results/profile-gpu.json

One tritonserver serves the benchmark repository's variants of a model (ours, naive, the null models);
each is driven in turn by one synchronous client at concurrency 1 (CUDA shared memory on a GPU host; with
--concurrency N by client.bench's load processes sharing N requests in flight), while
`py-spy record --nonblocking --idle --threads` samples every stub of that model. Non-blocking: the stub is
never paused (a paused stub misses the server's health checks, and native unwinding of the stripped stub
binary gave no symbols). A native call is then seen at the Python line that made it, so each sample inside
execute() is classified by its innermost frame, and where that is our code, by the text of its line:

  ort           ONNX Runtime's Python API and what it calls (binding, the run's host work, kernel launches)
  gpu_wait      a CUDA synchronisation (a stream's or event's synchronize)
  torch         torch calls (allocations, copies, DLPack on torch's side, stream switches)
  stub_objects  the python backend's own objects (request.inputs(), pb_utils tensors, DLPack, responses)
  python        the rest: our Python, the interpreter's own work

Each share is µs per execute: its samples / the sampling rate / the executes Triton counted meanwhile.
`outside` = Triton's compute_infer - the in-execute total: the stub's C++ work around execute (reading the
requests from shared memory, writing the responses), which py-spy sees as no Python frame at all. The top
lines (innermost frames) come with their source text.
"""

from __future__ import annotations

import argparse
import json
import linecache
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient

from client.bench_common import BATCH, ROOT, aligned, serving, sync_load, transport_for_ours
from client.load import Workload, load_in_processes, request_workers
from triton_ort.harness.processes import stub_processes
from triton_ort.harness.transport import ModelStatistics

SHARES = ("ort", "gpu_wait", "torch", "stub_objects", "python")
# Variants of each model in the benchmark repository (scripts/build_models.py --bench).
DEFAULT_VARIANTS = ("", "_naive", "_null_host", "_null_hostdl", "_null_pinned", "_null_device")
_STUB_WORDS = ("pb_utils", "request.inputs()", "to_dlpack()", "InferenceResponse", ".as_numpy()")
_ORT_WORDS = ("bind_input", "bind_output", "run_with_iobinding", "io_binding", "get_outputs", "session.run")
_TORCH_WORDS = ("torch.", ".copy_(", ".pin_memory(", ".to(", ".contiguous(", ".clone(", ".view(", "np.zeros")


def _parse_frame(frame: str) -> tuple[str, str, int]:
    """'run (triton_ort/runner.py:271)' -> ('run', 'triton_ort/runner.py', 271)."""
    function, _, rest = frame.partition(" (")
    file, _, line = rest.rstrip(")").rpartition(":")
    return function.strip(), file, int(line) if line.isdigit() else 0


def source_line(file: str, line: int, *folders: Path) -> str:
    """The text of a sampled line; py-spy names files relative to their sys.path entry (a model's own
    model.py: relative to its version folder, passed in `folders`)."""
    for folder in (*folders, *map(Path, sys.path)):
        text = linecache.getline(str(folder / file), line)
        if text:
            return text.strip()
    return ""


def classify(frames: list[str], *folders: Path) -> str | None:
    """One sampled stack of a stub's thread (root first, thread left out): its share, or None when the
    sample is outside execute."""
    parsed = [_parse_frame(f) for f in frames]
    if not any(function == "execute" for function, _, _ in parsed):
        return None
    function, file, line = parsed[-1]
    if file.startswith("onnxruntime/"):
        return "ort"
    text = source_line(file, line, *folders)
    if function == "synchronize" or ".synchronize(" in text:
        return "gpu_wait"
    if file.startswith("torch/"):
        return "torch"
    if "triton_python_backend_utils" in file or any(word in text for word in _STUB_WORDS):
        return "stub_objects"
    if any(word in text for word in _ORT_WORDS):
        return "ort"
    if any(word in text for word in _TORCH_WORDS):
        return "torch"
    return "python"


def read_raw(path: Path, *folders: Path) -> tuple[Counter[str], Counter[str], int]:
    """py-spy's raw (collapsed) output of one stub: samples per share and per innermost line inside
    execute, and the samples of the thread that runs execute (busy or idle: the rate actually kept)."""
    shares: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    per_thread: Counter[str] = Counter()
    executing: Counter[str] = Counter()
    for entry in path.read_text(errors="replace").splitlines():
        stack, _, count = entry.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        per_thread[thread] += int(count)
        share = classify(frames, *folders)
        if share is not None:
            shares[share] += int(count)
            lines[frames[-1]] += int(count)
            executing[thread] += int(count)
    main = executing.most_common(1)[0][0] if executing else None
    return shares, lines, per_thread[main] if main else 0


def profile_model(
    server: Any, model: str, served: str, work: Workload, args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    pids = [pid for pid, path in stub_processes(server.process.pid).items() if f"/{served}/" in path]
    if not pids:
        raise SystemExit(f"{served}: no stub found")
    with request_workers(client, served, transport_for_ours(), work, 1) as (workers, ask):
        ask()
        sync_load(
            client, served, workers[0], argparse.Namespace(warmup=args.warmup, duration=0.1, min_requests=1)
        )
        before = ModelStatistics.read(client, served)
        outputs = [folder / f"{served}-{pid}.txt" for pid in pids]
        samplers = [
            subprocess.Popen(
                [
                    args.py_spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--nonblocking",
                    "--idle",
                    "--threads",
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(int(args.seconds)),
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for pid, out in zip(pids, outputs, strict=True)
        ]
        time.sleep(1.0)  # py-spy attaches
        if args.concurrency == 1:
            latencies, _ = sync_load(
                client,
                served,
                workers[0],
                argparse.Namespace(warmup=0.0, duration=args.seconds - 2, min_requests=1),
            )
        else:  # the load of client.bench's top point: client processes sharing the concurrency
            latencies, _ = load_in_processes(
                server.grpc_url,
                served,
                transport_for_ours(),
                work,
                args.concurrency,
                args.client_processes,
                (0.0, args.seconds - 2),
            )
        after = ModelStatistics.read(client, served)
        errors = []
        for sampler in samplers:
            _, stderr = sampler.communicate(timeout=args.seconds + 60)
            if sampler.returncode:
                errors.append(stderr.decode(errors="replace")[-500:])
    stages = after.stage_us(before)
    executes = after.executions - before.executions
    model_dir = args.repository / served / "1"
    shares: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    ticks = 0
    for out in outputs:
        if out.exists():
            found, found_lines, thread_ticks = read_raw(out, model_dir)
            shares, lines, ticks = shares + found, lines + found_lines, ticks + thread_ticks
    # The rate py-spy kept: the executing thread gets one sample per tick, busy or idle.
    rate = ticks / (len(pids) * args.seconds) if ticks else float(args.rate)

    def us(samples: int) -> float:
        return round(samples / rate / max(executes, 1) * 1e6, 1)

    per_execute = {share: us(shares[share]) for share in SHARES}
    in_execute = sum(per_execute.values())
    per_execute["outside"] = round(stages.get("compute_infer", 0.0) - in_execute, 1)
    top = [
        {"frame": frame, "source": source_line(*_parse_frame(frame)[1:], model_dir), "us": us(count)}
        for frame, count in lines.most_common(args.top)
    ]
    latencies.sort()
    return {
        "model": model,
        "served": served,
        "stubs": len(pids),
        "concurrency": args.concurrency,
        "executes": executes,
        "requests_per_execute": round((after.requests - before.requests) / max(executes, 1), 2),
        "p50_us": round(latencies[len(latencies) // 2] * 1e6, 1),
        "stages_us": stages,
        "samples": dict(shares),
        "sampling_rate": round(rate, 1),
        "per_execute_us": per_execute,
        "top_lines": top,
        "errors": errors,
    }


def table(rows: list[dict[str, Any]]) -> str:
    header = ["served", "p50", "compute_infer", "compute_output", *SHARES, "outside"]
    body = [
        [
            row["served"],
            f"{row['p50_us']:.0f}",
            f"{row['stages_us'].get('compute_infer', 0):.0f}",
            f"{row['stages_us'].get('compute_output', 0):.0f}",
            *[f"{row['per_execute_us'][s]:.0f}" for s in (*SHARES, "outside")],
        ]
        for row in rows
    ]
    return aligned(header, body, numbers=range(1, len(header)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["demo"], choices=sorted(BATCH))
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    parser.add_argument("--repository", type=Path, default=ROOT / "bench_repository")
    parser.add_argument("--seconds", type=float, default=8.0, help="sampled seconds per variant")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rate", type=int, default=2000, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=12, help="innermost lines listed per variant")
    parser.add_argument(
        "--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="requests in flight while sampled (>1: load processes)"
    )
    parser.add_argument("--client-processes", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    served = [model + variant for model in args.models for variant in args.variants]
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="profile_stub_") as tmp,
        serving(args.repository, served) as server,
    ):
        for model in args.models:
            work = Workload.build(model, args.repository, BATCH[model])
            for variant in args.variants:
                rows.append(profile_model(server, model, model + variant, work, args, Path(tmp)))
                print(table(rows[-1:]), flush=True)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
