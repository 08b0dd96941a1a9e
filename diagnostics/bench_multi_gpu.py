"""Throughput on 1 GPU against 2 GPUs, same instance count: does a second GPU double the work done?

    python -m diagnostics.bench_multi_gpu --json results/multi-gpu.json     # a host with >= 2 GPUs

One tritonserver serves a compute-bound model (small input and output, `--layers` square MatMuls of
`--width` on `--batch` rows: milliseconds of GPU work per request, so the GPU, not the python backend's
per-request overhead, is the bottleneck) twice: `heavy_1gpu` with two instances on GPU 0 and
`heavy_2gpu` with one instance on each of GPUs 0 and 1. Closed-loop load, `--threads` synchronous gRPC
clients, numpy requests. Prints requests/s for each and their ratio; exits 1 on a wrong answer and 2 when
the ratio is below --min-ratio (target 1.8).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import model_config_pb2

from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.transport import infer
from triton_ort.model.onnx_files import save_model

ROOT = Path(__file__).resolve().parent.parent
MODEL_PY = ROOT / "model_repository" / "demo" / "1" / "model.py"
INPUT_WIDTH, OUTPUT_WIDTH = 64, 16
TF32_TOLERANCE = 5e-3
# Two instances in both layouts: only the number of GPUs under them differs.
LAYOUTS = {"heavy_1gpu": (2, [0]), "heavy_2gpu": (1, [0, 1])}


def heavy_model(path: Path, width: int, layers: int) -> Path:
    """x[batch, 64] -> tanh(x W_in) -> `layers` x tanh(h W) -> h W_out -> y[batch, 16]. One square weight
    serves every hidden layer: the compute of `layers` layers in the file size of one."""
    rng = np.random.default_rng(0)

    def weight(name: str, rows: int, cols: int) -> onnx.TensorProto:
        values = rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(rows)
        return numpy_helper.from_array(values, name)

    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["m0"]), helper.make_node("Tanh", ["m0"], ["h0"])]
    for layer in range(1, layers + 1):
        nodes += [
            helper.make_node("MatMul", [f"h{layer - 1}", "w"], [f"m{layer}"]),
            helper.make_node("Tanh", [f"m{layer}"], [f"h{layer}"]),
        ]
    nodes.append(helper.make_node("MatMul", [f"h{layers}", "w_out"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "heavy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", INPUT_WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUTPUT_WIDTH])],
        [weight("w_in", INPUT_WIDTH, width), weight("w", width, width), weight("w_out", width, OUTPUT_WIDTH)],
    )
    return save_model(graph, path)


def model_config(name: str, count: int, gpus: list[int]) -> str:
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=0)
    for tensor_name, width, entries in (("x", INPUT_WIDTH, config.input), ("y", OUTPUT_WIDTH, config.output)):
        entries.add(name=tensor_name, data_type=model_config_pb2.TYPE_FP32, dims=[-1, width])
    group = config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_GPU, count=count)
    group.gpus.extend(gpus)
    config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
    return str(text_format.MessageToString(config))


def build_repository(repository: Path, width: int, layers: int) -> Path:
    onnx_path = heavy_model(repository / "heavy.onnx", width, layers)
    for name, (count, gpus) in LAYOUTS.items():
        version = repository / name / "1"
        version.mkdir(parents=True)
        shutil.copy(onnx_path, version / "model.onnx")
        shutil.copy(MODEL_PY, version / "model.py")
        (repository / name / "config.pbtxt").write_text(model_config(name, count, gpus))
    return onnx_path


def throughput(url: str, model: str, x: NDArray[Any], threads: int, seconds: float, warmup_s: float) -> float:
    """Requests per second completed by `threads` closed-loop clients, after `warmup_s` of the same load."""
    counts = [0] * threads
    measuring = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []

    def client_loop(slot: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        try:
            while not stop.is_set():
                infer(client, model, {"x": x}, ["y"])
                if measuring.is_set():
                    counts[slot] += 1
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            stop.set()

    workers = [threading.Thread(target=client_loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(warmup_s)
    measuring.set()
    started = time.perf_counter()
    time.sleep(seconds)
    measuring.clear()
    elapsed = time.perf_counter() - started
    stop.set()
    for worker in workers:
        worker.join()
    if errors:
        raise RuntimeError(f"{model}: a request failed: {errors[0]}")
    return sum(counts) / elapsed


@contextlib.contextmanager
def serving(repository: Path) -> Iterator[Any]:
    from triton_ort.harness.server import LocalTritonServer

    pools = [f"--cuda-memory-pool-byte-size={gpu}:{256 << 20}" for gpu in range(torch.cuda.device_count())]
    with LocalTritonServer(repository, extra_args=pools, startup_timeout_s=300) as server:
        yield server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--batch", type=int, default=2048, help="rows per request")
    parser.add_argument("--threads", type=int, default=8, help="concurrent closed-loop clients")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured time per layout")
    parser.add_argument("--warmup-seconds", type=float, default=10.0)
    parser.add_argument("--min-ratio", type=float, default=1.8)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if torch.cuda.device_count() < 2:
        print(f"bench_multi_gpu: needs 2 GPUs, this host has {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    x = np.random.default_rng(1).standard_normal((args.batch, INPUT_WIDTH)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="bench_multi_gpu_") as tmp:
        onnx_path = build_repository(Path(tmp), args.width, args.layers)
        small = x[:8]
        want = reference_outputs(onnx_path, {"x": small})["y"]
        results: dict[str, float] = {}
        with serving(Path(tmp)) as server:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            for model in LAYOUTS:
                for _ in range(4):  # several, so that every instance of the layout answers at least once
                    got = infer(client, model, {"x": small}, ["y"])[0]["y"]
                    if not np.allclose(got, want, rtol=TF32_TOLERANCE, atol=TF32_TOLERANCE):
                        print(f"bench_multi_gpu: {model} answered wrong: {np.abs(got - want).max()}")
                        return 1
                results[model] = throughput(
                    server.grpc_url, model, x, args.threads, args.seconds, args.warmup_seconds
                )
                print(f"{model}: {results[model]:.1f} requests/s", flush=True)
    ratio = results["heavy_2gpu"] / results["heavy_1gpu"]
    report = {"requests_per_s": results, "ratio": round(ratio, 3), "target": args.min_ratio, **vars(args)}
    report["json"] = str(args.json) if args.json else None
    print(f"throughput 2 GPUs / 1 GPU: {ratio:.2f}x (target >= {args.min_ratio})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if ratio >= args.min_ratio else 2


if __name__ == "__main__":
    sys.exit(main())
