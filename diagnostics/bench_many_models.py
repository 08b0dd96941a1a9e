"""Many models on one GPU: eight different models under a mixed load, by how they are served.

    python -m diagnostics.bench_many_models --json FILE [--mps]

Eight MLPs of different widths (512 -> h -> h -> 16, h from 256 to 4096; the same 512-wide input) are
written into a repository of their own, each served by our model.py. Three ways of serving them, one
server each, are loaded in turn:

  i1        each model with 1 instance (8 stubs)
  i2        each model with 2 instances, as the demo ships (16 stubs)
  ensemble  each model with 1 instance, behind one Triton ensemble that sends every request to all
            eight (one client request = one request per model)

Mixed load: each model gets `--per-model` requests in flight from a load process of its own (CUDA shared
memory), all eight at once; the ensemble gets eight times that. Per model: requests per second, p50 and
p99. Memory, with the arenas grown by that load: each stub's GPU memory and RSS (nvidia-smi, psutil), the
server's, and the whole GPU's use with the server up minus before it (read once it stops falling).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from client.bench_common import (
    ROOT,
    aligned,
    check_answer,
    device_used_mib,
    hold_cuda_context,
    host_environment,
    memory_reading,
    serving,
    settled_device_used_mib,
    transport_for_ours,
    write_report,
)
from client.load import Workload, load_in_processes, request_workers
from triton_ort.harness.server import exit_on_termination

WIDTHS = (256, 512, 768, 1024, 1536, 2048, 3072, 4096)
IN_WIDTH, OUT_WIDTH, ROWS = 512, 16, 64
ZERO_COPY_MODEL_PY = ROOT / "model_repository" / "demo" / "1" / "model.py"
ENSEMBLE = "all8"
LAYOUTS = ("i1", "i2", "ensemble")


def mlp_onnx(path: Path, hidden: int, seed: int) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from triton_ort.model.onnx_files import save_model

    rng = np.random.default_rng(seed)
    shapes = [(IN_WIDTH, hidden), (hidden, hidden), (hidden, OUT_WIDTH)]
    weights = [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]
    nodes, last = [], "x"
    for i in range(len(shapes)):
        out = "y" if i == len(shapes) - 1 else f"h{i}"
        matmul = out if i == len(shapes) - 1 else f"m{i}"
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [matmul]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [matmul], [out]))
        last = out
    graph = helper.make_graph(
        nodes,
        f"mlp{hidden}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN_WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT_WIDTH])],
        initializer=[numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(graph, path)


def model_names() -> list[str]:
    return [f"m{width}" for width in WIDTHS]


def write_repository(root: Path, instances: int) -> None:
    """The eight models with `instances` each, and the ensemble over them."""
    for seed, (name, width) in enumerate(zip(model_names(), WIDTHS, strict=True)):
        version = root / name / "1"
        if not (version / "model.onnx").exists():
            mlp_onnx(version / "model.onnx", width, seed)
        shutil.copy(ZERO_COPY_MODEL_PY, version / "model.py")
        (root / name / "config.pbtxt").write_text(
            f"""name: "{name}"
backend: "python"
max_batch_size: 1024
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ {IN_WIDTH} ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ {OUT_WIDTH} ] }} ]
instance_group [ {{ kind: KIND_AUTO, count: {instances} }} ]
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
parameters [ {{ key: "FORCE_CPU_ONLY_INPUT_TENSORS", value: {{ string_value: "no" }} }} ]
"""
        )
    steps = ",\n".join(
        f'    {{ model_name: "{name}", model_version: -1, input_map {{ key: "x", value: "x" }}, '
        f'output_map {{ key: "y", value: "y_{name}" }} }}'
        for name in model_names()
    )
    outputs = ", ".join(
        f'{{ name: "y_{name}", data_type: TYPE_FP32, dims: [ {OUT_WIDTH} ] }}' for name in model_names()
    )
    (root / ENSEMBLE / "1").mkdir(parents=True, exist_ok=True)
    (root / ENSEMBLE / "config.pbtxt").write_text(
        f"""name: "{ENSEMBLE}"
platform: "ensemble"
max_batch_size: 1024
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ {IN_WIDTH} ] }} ]
output [ {outputs} ]
ensemble_scheduling {{
  step [
{steps}
  ]
}}
"""
    )


def ensemble_workload(works: dict[str, Workload]) -> Workload:
    """All eight answers of one input (every model's workload draws the same x: same seed and shape)."""
    first = next(iter(works.values()))
    return Workload(
        first.onnx_path,
        ROWS,
        first.inputs,
        {f"y_{name}": work.reference["y"] for name, work in works.items()},
        {f"y_{name}": work.layout["y"] for name, work in works.items()},
    )


def checked(url: str, served: str, work: Workload) -> None:
    client = grpcclient.InferenceServerClient(url)
    with request_workers(client, served, transport_for_ours(), work, 1) as (_, ask):
        check_answer(served, work, ask)


def mixed_load(url: str, loads: dict[str, tuple[Workload, int]], args: argparse.Namespace) -> dict[str, Any]:
    """Every served model's closed-loop load at once, each from a load process of its own."""
    results: dict[str, Any] = {}

    def drive(served: str, work: Workload, concurrency: int) -> None:
        timing = (args.warmup, args.seconds)
        latencies, rate = load_in_processes(url, served, transport_for_ours(), work, concurrency, 1, timing)
        us = np.array(latencies) * 1e6
        results[served] = {
            "requests_per_s": rate,
            "p50_us": float(np.percentile(us, 50)),
            "p99_us": float(np.percentile(us, 99)),
        }

    threads = [threading.Thread(target=drive, args=(s, w, c)) for s, (w, c) in loads.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {served: results[served] for served in loads}


def measure_layout(layout: str, mps: bool, args: argparse.Namespace) -> dict[str, Any]:
    root = args.repository / layout
    write_repository(root, instances=2 if layout == "i2" else 1)
    works = {name: Workload.build(name, root, ROWS) for name in model_names()}
    served = [*model_names(), *([ENSEMBLE] if layout == "ensemble" else [])]
    if layout == "ensemble":
        loads = {ENSEMBLE: (ensemble_workload(works), args.per_model * len(works))}
    else:
        loads = {name: (work, args.per_model) for name, work in works.items()}
    before = settled_device_used_mib()
    with serving(root, served, mps=mps) as server:
        for name, (work, _) in loads.items():
            checked(server.grpc_url, name, work)
        per_model = mixed_load(server.grpc_url, loads, args)
        reading = memory_reading(server.process.pid, mps)
        after = device_used_mib()
    return {
        "layout": layout,
        "mps": mps,
        "per_model": per_model,
        **reading,
        "device_used_mib": None if before is None or after is None else after - before,
    }


def table(rows: list[dict[str, Any]]) -> str:
    header = ["layout", "mps", "model", "req/s", "p50 us", "p99 us", "stubs", "stub GPU MiB", "device MiB"]
    cells = []
    for row in rows:
        gpu, stubs = row["stub_gpu_mib"], len(row["stub_rss_mib"])
        for served, point in row["per_model"].items():
            cells.append(
                [
                    row["layout"],
                    "yes" if row["mps"] else "no",
                    served,
                    f"{point['requests_per_s']:.0f}",
                    f"{point['p50_us']:.0f}",
                    f"{point['p99_us']:.0f}",
                    str(stubs),
                    f"{sum(gpu):.0f}",
                    "-" if row["device_used_mib"] is None else f"{row['device_used_mib']:.0f}",
                ]
            )
    return aligned(header, cells, numbers=range(3, 9))


def main() -> None:
    exit_on_termination()  # a stopped run still stops the server it started
    hold_cuda_context()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    parser.add_argument("--repository", type=Path, default=ROOT / "many_models_repository")
    parser.add_argument("--per-model", type=int, default=2, help="requests in flight per model")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--mps", action="store_true", help="every layout again under CUDA MPS")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [
        measure_layout(layout, mps, args)
        for mps in ((False, True) if args.mps else (False,))
        for layout in args.layouts
    ]
    print(table(rows))
    if args.json:
        command = " ".join(["python -m diagnostics.bench_many_models", *sys.argv[1:]])
        write_report(args.json, {"environment": host_environment(), "command": command, "results": rows})


if __name__ == "__main__":
    main()
