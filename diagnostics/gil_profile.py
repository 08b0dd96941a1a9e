"""How long does each request hold the GIL in our stub, and in which step? The in-flight mode's lanes share
one stub and so one GIL: every microsecond of Python a request costs is a microsecond no other lane can
use, and at about 600 us a request a stub stops near 1650 requests/s, below what the GPU serves.

A real tritonserver serves our model.py, one instance (classic, and in flight with --lanes lanes), on the
CPU; client.load's closed loop sends numpy over gRPC at --concurrency while py-spy samples the instance's
stub with --gil (only the thread holding the GIL is recorded; --nonblocking, so the stub is never paused).
The samples in each step, over the requests the server counted in the same window, give GIL-held us per
request by step. Two shapes: the demo's (100 x 2010 in, 100 x 2 out) and the 4096-wide MLP's (1024 x 4096
in and out); each model is one cheap ONNX node of that signature (a MatMul, a Relu), since ORT's run
releases the GIL and its length is not the question.

    python -m diagnostics.gil_profile --json results/gil.json           # needs py-spy on PATH
    python -m diagnostics.gil_profile --gpu --raw results/gil-stacks   # GPU instances, CUDA shared memory

`--gpu` serves the models on GPU instances and sends through CUDA shared memory (the GPU host's path: the
inputs reach the stub on the device, the outputs leave through DLPack); `--raw DIR` keeps py-spy's stacks
(one file per model, with line numbers) for reading a step line by line.

Steps are told apart by the innermost frame of ours on the stack (STEPS, by function and file);
"python backend" is time inside pb_utils' own calls with none of ours below them (the stub's C++ reached
from its own Python: reading requests, the response sender), "other" what matches no step. On Triton
before 2.47 (no response sender for a model that is not decoupled) only the classic instance is measured.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from client.bench_common import aligned, report_of, serving, write_report
from client.load import Workload, load_in_processes
from triton_ort.backend import MODEL_PY
from triton_ort.harness.processes import stub_processes
from triton_ort.harness.repository import ModelSpec, write_config
from triton_ort.harness.transport import ModelStatistics
from triton_ort.model.onnx_files import save_model

# (name, input, output, in width, out width, rows per request, ONNX node)
SHAPES = {
    "demo": ("np_script_embeddings", "np_logits", 2010, 2, 100, "MatMul"),
    "mlp4096": ("x", "y", 4096, 4096, 1024, "Relu"),
}

# Innermost frame of ours -> step: (function names, file names); the first rule that matches a frame wins,
# frames read from the innermost out.
STEPS: list[tuple[str, set[str], set[str]]] = [
    ("metrics", set(), {"metrics.py", "stats.py"}),
    ("answer (Triton's tensors)", {"_response", "_output", "_numpy_viewable"}, set()),
    ("send (response sender)", {"_send"}, set()),
    ("read inputs", {"_read_inputs", "_host_array", "_strings", "_read_for_lanes"}, set()),
    ("bind + run setup", set(), {"runner.py", "gather.py", "arrays.py", "run_plan.py", "model_plan.py"}),
    (
        "ORT call (GIL held)",
        {"run_with_iobinding", "run", "bind_input", "bind_output"},
        {"onnxruntime_inference_collection.py"},
    ),
    ("lane scheduling", set(), {"inflight.py"}),
    (
        "execute intake",
        {"execute", "_queue", "_copies_waited_for", "_device_inputs", "request_rows", "infer"},
        {"model.py", "execute.py", "instance.py"},
    ),
]
OURS = ("triton_ort", "model.py")


def write_repository(repository: Path, lanes: int, kind: str = "KIND_CPU") -> list[str]:
    """Per shape a one-node ONNX model served classic (one instance) and in flight (one instance, `lanes`),
    on instances of `kind`."""
    names = []
    for shape, (x, y, width, out_width, _, op) in SHAPES.items():
        inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", width])]
        outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", out_width])]
        initializers = []
        if op == "MatMul":
            weights = np.full((width, out_width), 1 / width, np.float32)
            initializers = [helper.make_tensor("w", TensorProto.FLOAT, weights.shape, weights.ravel())]
        node = helper.make_node(op, [x, "w"] if op == "MatMul" else [x], [y])
        graph = helper.make_graph([node], shape, inputs, outputs, initializer=initializers)
        for name, count in ((f"{shape}_classic", 0), (f"{shape}_inflight{lanes}", lanes)):
            version = repository / name / "1"
            version.mkdir(parents=True, exist_ok=True)
            save_model(graph, version / "model.onnx")
            (version / "model.py").write_text(MODEL_PY)
            parameters = {"inflight_lanes": str(count)} if count else {}
            if kind == "KIND_GPU":  # CUDA shared memory's inputs reach the stub on the device
                parameters["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
            # No inputs or outputs listed: the backend completes them from the ONNX file.
            spec = ModelSpec(
                name, (), (), 4 * SHAPES[shape][4], queue_delay_us=0, kind=kind, parameters=parameters
            )
            write_config(repository / name, spec.config())
            names.append(name)
    return names


def stub_of(server_pid: int, model: str) -> int:
    """The pid of `model`'s instance stub (the model.py it runs is in the model's folder)."""
    for pid, model_py in stub_processes(server_pid).items():
        if Path(model_py).parent.parent.name == model:
            return pid
    raise SystemExit(f"no stub found for {model}")


def step_of(stack: list[str]) -> str:
    """A sampled stack's step: frames are 'function (file:line)', outermost first."""
    for frame in reversed(stack):
        qualified, _, where = frame.partition(" (")
        function = qualified.rsplit(".", 1)[-1]  # py-spy names methods Class.method
        file = where.rsplit("/", 1)[-1].split(":")[0]
        for step, functions, files in STEPS:
            if function in functions or file in files:
                if step == "ORT call (GIL held)" and file != "onnxruntime_inference_collection.py":
                    continue
                return step
        if any(mark in where for mark in OURS):
            return "other (ours)"
    return "python backend / other"


def record(
    pid: int, seconds: float, rate: int, native: bool, raw: Path | None = None
) -> collections.Counter[str]:
    """py-spy's GIL-holding samples of `pid` over `seconds`, counted by step (the stacks kept in `raw`)."""
    command = ["py-spy", "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate)]
    command += ["--gil", "--nonblocking", "--format", "raw", "--output", "/dev/stdout", "--threads"]
    command += ["--native"] if native else []
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if raw is not None:
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(out)
    steps: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            frames = [f for f in stack.split(";") if not f.startswith("thread (")]
            steps[step_of(frames)] += int(count)
    return steps


def profile(url: str, server_pid: int, model: str, args: argparse.Namespace) -> dict[str, Any]:
    x, y, width, out_width, batch, _ = SHAPES[model.split("_")[0]]
    rows = np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32)
    work = Workload(Path(), batch, {x: rows}, {}, {y: (np.dtype(np.float32), (batch, out_width))})
    client = grpcclient.InferenceServerClient(url)
    stub = stub_of(server_pid, model)
    seconds = args.seconds
    counts: dict[str, Any] = {}

    def sample() -> None:
        time.sleep(args.warmup)
        counts["before"] = ModelStatistics.read(client, model)
        raw = args.raw / f"{model}.txt" if args.raw else None
        counts["steps"] = record(stub, seconds, args.rate, args.native, raw)
        counts["after"] = ModelStatistics.read(client, model)

    sampler = threading.Thread(target=sample)
    sampler.start()
    latencies, rate = load_in_processes(
        url,
        model,
        "cuda-shm" if args.gpu else "numpy",
        work,
        args.concurrency,
        args.client_processes,
        (args.warmup, seconds + 1.0),
    )
    sampler.join()
    requests = counts["after"].requests - counts["before"].requests
    per_request = {step: n / args.rate / max(requests, 1) * 1e6 for step, n in counts["steps"].most_common()}
    return {
        "requests": requests,
        "requests_per_s": rate,
        "p50_us": float(np.percentile(np.array(latencies) * 1e6, 50)),
        "gil_us_per_request": round(sum(per_request.values()), 1),
        "steps_us_per_request": {k: round(v, 1) for k, v in per_request.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, default=Path("bench_repository") / "gil")
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C/C++ frames too)")
    parser.add_argument("--models", nargs="*", help="of the repository's (default: every one)")
    parser.add_argument("--gpu", action="store_true", help="GPU instances; requests in CUDA shared memory")
    parser.add_argument("--raw", type=Path, help="a folder for py-spy's stacks, one file per model")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not on PATH: pip install py-spy")
    names = write_repository(args.repository, args.lanes, "KIND_GPU" if args.gpu else "KIND_CPU")
    names = [n for n in names if not args.models or n in args.models]
    results: dict[str, Any] = {}
    with serving(args.repository, names, extra_args=["--exit-on-error=false"]) as server:
        assert server.process is not None
        version = str(grpcclient.InferenceServerClient(server.grpc_url).get_server_metadata().version)
        for name in names:
            print(f"profiling {name}", file=sys.stderr, flush=True)
            try:
                results[name] = profile(server.grpc_url, server.process.pid, name, args)
            except Exception as error:  # in flight on a release without the response sender
                results[name] = {"error": str(error)[-300:]}
    steps = [s for s, _, _ in STEPS] + ["other (ours)", "python backend / other"]
    header = ["step (GIL-held us per request)", *names]
    table = [
        [step, *(f"{results[n].get('steps_us_per_request', {}).get(step, 0):.0f}" for n in names)]
        for step in steps
    ]
    table.append(["all", *(f"{results[n].get('gil_us_per_request', 0):.0f}" for n in names)])
    table.append(["req/s", *(f"{results[n].get('requests_per_s', 0):.0f}" for n in names)])
    print(f"tritonserver {version}, c={args.concurrency}, {args.seconds:.0f} s sampled at {args.rate} Hz")
    print(aligned(header, table, numbers=range(1, len(header))))
    if args.json:
        write_report(
            args.json,
            report_of(
                "diagnostics.gil_profile",
                tritonserver=version,
                lanes=args.lanes,
                gpu=args.gpu,
                results=results,
            ),
        )


if __name__ == "__main__":
    main()
