"""What one instance's memory is made of: each part in a fresh process, read by nvidia-smi and psutil.

    python -m diagnostics.bench_memory --models demo mlp4096 --json FILE
    python -m diagnostics.bench_memory --stages cpu_ort cpu_torch cpu_instance --repository model_repository

A python-backend stub is one process per instance, and everything it holds on the GPU is its own: the CUDA
context, what torch and ONNX Runtime load into it, their memory pools. Each stage below builds one part
more (or one alternative) in a process of its own, which then waits while this parent reads its GPU memory
(nvidia-smi's per-process figure, the one `diagnostics.bench_instances` reports per stub) and RSS:

  context          the CUDA primary context alone (driver API, nothing loaded)
  context_stack    the same with the per-thread stack limit lowered to the instance's default
                   (cuda_stack_bytes, src/triton_ort/runtime/cuda_context.py): the context's local memory
  torch            torch's CUDA initialised (one tensor on the device)
  ort              ONNX Runtime's CUDA session of the model and one run, without torch
  instance         a ModelInstance as a stub holds it (torch + ORT + warm-up, the shipped options), after
                   one gathered execute of 16 requests (the arenas as c=16 grows them)
  instance_cuda_stack  the instance with CUDA's own stack limit (cuda_stack_bytes: 0), as before it
  instance_same    the instance with arena_extend_strategy kSameAsRequested (ORT's arena grows by what
                   a run asks, not to the next power of two)
  instance_stack256    the instance with cuda_stack_bytes 256 (the default until 2026-12-05: 64 now)
  instance_no_graphs   the instance with CUDA graphs off (the shipped demo has them on)
  instance_cublas_ws0  the instance with CUBLAS_WORKSPACE_CONFIG=:0:0 (no cuBLAS default workspace)
  instance_eager       the instance with CUDA_MODULE_LOADING=EAGER (every kernel loaded at start)
  cudart           torch imported, CUDA's runtime initialised without torch's CUDA (cudaFree(0))
  cublas           cudart, and one cuBLAS and one cuBLASLt handle (as ORT's CUDA EP makes them)
  cudnn            cudart, and one cuDNN handle (as ORT's CUDA EP makes it)

A CPU instance's host memory, the same way (no GPU needed; RSS and USS, the pages no other process shares):

  cpu_ort          ONNX Runtime's CPU session of the model and one gathered-size run, numpy only
  cpu_torch        the same with torch imported first, as a GPU stub (or one with hooks) holds it
  cpu_instance     a CPU ModelInstance as a stub holds it (on numpy, no torch: triton_ort.runtime.arrays),
                   after one gathered execute of 16 requests

`--served-small N` measures a whole server instead: N tiny CPU models (y = x * k, one instance each,
served by the demo's model.py) and the demo on one CPU instance (from --repository), one request each,
then every stub's RSS and USS and their sums: what a repository of many small models costs the host.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from client.bench_common import BATCH, ROOT, aligned, report_of, write_report
from triton_ort.harness.processes import MIB, gpu_memory_by_pid
from triton_ort.harness.server import exit_on_termination
from triton_ort.model.options import DEFAULT_CUDA_STACK_BYTES
from triton_ort.runtime.cuda_context import lower_stack_limit, stack_limit

GPU_STAGES = (
    "context",
    "context_stack",
    "cudart",
    "cublas",
    "cudnn",
    "torch",
    "ort",
    "instance",
    "instance_cuda_stack",
    "instance_same",
    "instance_stack256",
    "instance_no_graphs",
    "instance_cublas_ws0",
    "instance_eager",
)
CPU_STAGES = ("cpu_ort", "cpu_torch", "cpu_instance")
STAGES = GPU_STAGES + CPU_STAGES
STAGE_PARAMETERS = {
    "instance": {},
    "instance_cuda_stack": {"cuda_stack_bytes": "0"},
    "instance_same": {"arena_extend_strategy": "kSameAsRequested"},
    "instance_stack256": {"cuda_stack_bytes": "256"},
    "instance_no_graphs": {},
    "instance_cublas_ws0": {},
    "instance_eager": {},
    "cpu_instance": {},
}
STAGE_ENVIRONMENT = {
    "instance_cublas_ws0": {"CUBLAS_WORKSPACE_CONFIG": ":0:0"},
    "instance_eager": {"CUDA_MODULE_LOADING": "EAGER"},
}


def _driver() -> Any:
    cuda = ctypes.CDLL("libcuda.so.1")
    if cuda.cuInit(0) != 0:
        raise RuntimeError("cuInit failed")
    return cuda


def _primary_context(cuda: Any) -> None:
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    assert cuda.cuCtxSetCurrent(context) == 0


def _library(*names: str) -> Any:
    """The first of these sonames that loads (torch has loaded CUDA's libraries by then)."""
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError(f"none of {names} loads")


def _handles(stage: str) -> dict[str, Any]:
    """CUDA's runtime, and the library handles ORT's CUDA EP makes, each without torch's CUDA or ORT."""
    import torch  # noqa: F401  (loads the nvidia-* libraries, initialises no CUDA)

    cudart = _library("libcudart.so.13", "libcudart.so.12")
    assert cudart.cudaFree(ctypes.c_void_p(0)) == 0
    handle = ctypes.c_void_p()
    if stage == "cublas":
        assert _library("libcublas.so.13", "libcublas.so.12").cublasCreate_v2(ctypes.byref(handle)) == 0
        lt = ctypes.c_void_p()
        assert _library("libcublasLt.so.13", "libcublasLt.so.12").cublasLtCreate(ctypes.byref(lt)) == 0
    elif stage == "cudnn":
        assert _library("libcudnn.so.9").cudnnCreate(ctypes.byref(handle)) == 0
    globals()["_kept"] = handle
    return {}


def _instance(
    model: str, repository: Path, parameters: dict[str, str], kind: str = "GPU", graphs: bool | None = None
) -> Any:
    from google.protobuf import json_format

    from triton_ort import ModelInstance
    from triton_ort.cli.tune import set_graphs
    from triton_ort.harness.repository import read_config

    folder = repository / model
    served = read_config(folder)
    for key, value in parameters.items():
        served.parameters[key].string_value = value
    if graphs is not None:
        set_graphs(served, graphs)  # where the config sets them (the parameter or the field)
    config = json_format.MessageToDict(served, preserving_proto_field_name=True)
    instance = ModelInstance(config, folder / "1", instance_kind=kind, device_id=0, numpy_on_cpu=True)
    spec = instance.runner.inputs[0]
    width = [d if isinstance(d, int) else 1 for d in spec.shape[1:]]
    request = {spec.name: instance.runner.arrays.zeros([BATCH[model], *width], spec.element_type)}
    for result in instance.infer([request] * 16):  # one gathered execute, as c=16 makes them
        assert not isinstance(result, Exception), result
    return instance


SMALL_MODEL_PY = ROOT / "model_repository" / "demo" / "1" / "model.py"


def write_small_models(root: Path, count: int) -> list[str]:
    """`count` tiny models (float x[4] -> y = x * k, k their number), one CPU instance each."""
    from onnx import TensorProto, helper, numpy_helper

    from triton_ort.model.onnx_files import save_model

    names = []
    for k in range(1, count + 1):
        name = f"small{k}"
        graph = helper.make_graph(
            [helper.make_node("Mul", ["x", "k"], ["y"])],
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
            initializer=[numpy_helper.from_array(np.full([1], float(k), np.float32), "k")],
        )
        save_model(graph, root / name / "1" / "model.onnx")
        (root / name / "1" / "model.py").write_bytes(SMALL_MODEL_PY.read_bytes())
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            'input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
            'output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
            "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
        )
        names.append(name)
    return names


def write_cpu_demo(root: Path, repository: Path) -> None:
    """The demo of `repository`, on one CPU instance."""
    import shutil

    shutil.copytree(repository / "demo", root / "demo", ignore=shutil.ignore_patterns("__pycache__"))
    config = root / "demo" / "config.pbtxt"
    text = config.read_text()
    start = text.index("instance_group")
    end = text.index("\n", start)
    config.write_text(text[:start] + "instance_group [ { kind: KIND_CPU, count: 1 } ]" + text[end:])


def measure_served_small(count: int, root: Path, repository: Path) -> dict[str, Any]:
    """Serve `count` tiny models and the demo in one server, ask each once (checking the tiny ones'
    answers), read every stub."""
    import tritonclient.http as httpclient

    from triton_ort.harness.processes import stub_processes
    from triton_ort.harness.server import LocalTritonServer

    names = write_small_models(root, count)
    write_cpu_demo(root, repository)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with LocalTritonServer(root) as server:
        assert server.process is not None
        client = httpclient.InferenceServerClient(server.http_url)
        for k, name in enumerate(names, start=1):
            item = httpclient.InferInput("x", [2, 4], "FP32")
            item.set_data_from_numpy(x)
            answer = client.infer(name, [item]).as_numpy("y")
            assert answer is not None and np.array_equal(answer, x * k), f"{name} answered {answer}"
        item = httpclient.InferInput("np_script_embeddings", [BATCH["demo"], 2010], "FP32")
        item.set_data_from_numpy(np.zeros([BATCH["demo"], 2010], np.float32))
        assert client.infer("demo", [item]).as_numpy("np_logits") is not None
        stubs = stub_processes(server.process.pid)
        demo = [pid for pid, model_py in stubs.items() if "/demo/" in model_py]
        small = sorted(pid for pid in stubs if pid not in demo)
        memory = [psutil.Process(pid).memory_full_info() for pid in small]
        demo_memory = psutil.Process(demo[0]).memory_full_info()
        server_rss = psutil.Process(server.process.pid).memory_info().rss
    return {
        "models": count,
        "stubs": len(small),
        "stub_rss_mib": [m.rss / MIB for m in memory],
        "stub_uss_mib": [m.uss / MIB for m in memory],
        "stubs_rss_total_mib": sum(m.rss for m in memory) / MIB,
        "stubs_uss_total_mib": sum(m.uss for m in memory) / MIB,
        "demo_stub_rss_mib": demo_memory.rss / MIB,
        "demo_stub_uss_mib": demo_memory.uss / MIB,
        "server_rss_mib": server_rss / MIB,
    }


def run_stage(stage: str, model: str, repository: Path) -> dict[str, Any]:
    """Build the stage in this process; what it reports of itself."""
    report: dict[str, Any] = {}
    if stage.startswith("context"):
        cuda = _driver()
        _primary_context(cuda)
        if stage == "context_stack":
            report["stack_bytes_before"] = stack_limit()
            report["stack_bytes_after"] = lower_stack_limit(DEFAULT_CUDA_STACK_BYTES)
        return report
    if stage in ("cudart", "cublas", "cudnn"):
        return _handles(stage)
    if stage in ("ort", "cpu_ort", "cpu_torch"):
        if stage == "cpu_torch":
            import torch
        import numpy as np
        import onnxruntime as ort

        path = repository / model / "1" / "model.onnx"
        provider = "CUDAExecutionProvider" if stage == "ort" else "CPUExecutionProvider"
        session = ort.InferenceSession(str(path), providers=[provider])
        spec = session.get_inputs()[0]
        width = [d if isinstance(d, int) else 1 for d in spec.shape[1:]]
        rows = BATCH[model] * (1 if stage == "ort" else 16)  # a CPU stage: the gathered run of 16 requests
        session.run(None, {spec.name: np.zeros([rows, *width], np.float32)})
        report["providers"] = session.get_providers()
        globals()["_kept"] = session
        return report
    if stage == "cpu_instance":
        globals()["_kept"] = _instance(model, repository, STAGE_PARAMETERS[stage], kind="CPU")
        return report
    import torch

    if stage == "torch":
        globals()["_kept"] = torch.zeros(1, device="cuda")
    else:
        graphs = False if stage == "instance_no_graphs" else None
        globals()["_kept"] = _instance(model, repository, STAGE_PARAMETERS[stage], graphs=graphs)
        report["stack_bytes_after"] = stack_limit()
    torch.cuda.synchronize()
    report["torch_reserved_mib"] = torch.cuda.memory_reserved() / MIB
    return report


def child_main(stage: str, model: str, repository: Path) -> None:
    report = run_stage(stage, model, repository)
    report["torch_imported"] = "torch" in sys.modules  # a stage's figure holds torch's or not
    print(json.dumps(report), flush=True)
    sys.stdin.read()  # held until the parent has read this process's memory


def measure(stage: str, model: str, repository: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "diagnostics.bench_memory", "--child", stage, "--model", model]
    command += ["--repository", str(repository)]
    environment = {**os.environ, **STAGE_ENVIRONMENT.get(stage, {})}
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=environment
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=60)
            return {"stage": stage, "model": model, "error": f"exited {child.returncode}"}
        gpu = None
        if stage in GPU_STAGES:
            time.sleep(1.0)  # nvidia-smi's per-process figure lags the allocation a little
            gpu = (gpu_memory_by_pid() or {}).get(child.pid)
        memory = psutil.Process(child.pid).memory_full_info()
        child.stdin.close()
        child.wait(timeout=60)
    return {
        "stage": stage,
        "model": model,
        "gpu_mib": None if gpu is None else gpu / MIB,
        "rss_mib": memory.rss / MIB,
        "uss_mib": memory.uss / MIB,
        **json.loads(line),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["demo"], choices=sorted(BATCH))
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--repository", type=Path, default=ROOT / "bench_repository")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--served-small", type=int, metavar="N", help="N tiny CPU models in one server")
    parser.add_argument("--child", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.model, args.repository)
        return
    exit_on_termination()
    if args.served_small:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="bench_memory_") as scratch:
            report = measure_served_small(args.served_small, Path(scratch), args.repository)
        print(json.dumps(report, indent=2))
        if args.json:
            write_report(args.json, report_of("diagnostics.bench_memory", **report))
        return
    rows = []
    for model in args.models:
        for stage in args.stages:
            if stage.startswith("context") and model != args.models[0]:
                continue  # the same for every model
            rows.append(measure(stage, model, args.repository))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    cells = [
        [
            r["model"],
            r["stage"],
            f"{r.get('gpu_mib') or 0:.0f}",
            f"{r.get('rss_mib') or 0:.0f}",
            f"{r.get('uss_mib') or 0:.0f}",
            f"{r.get('torch_reserved_mib', 0):.0f}",
            str(r.get("stack_bytes_after", "")),
            r.get("error", ""),
        ]
        for r in rows
    ]
    print(
        aligned(
            ["model", "stage", "GPU MiB", "RSS MiB", "USS MiB", "torch reserved", "stack B", "error"], cells
        )
    )
    if args.json:
        write_report(args.json, report_of("diagnostics.bench_memory", rows=rows))


if __name__ == "__main__":
    main()
