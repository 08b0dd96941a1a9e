"""The zero-copy path on a real GPU: run on the GPU test host (../shared/GPU.md), skipped elsewhere.

What is checked: CUDA tensors are bound by pointer with no host<->device copy (counted by CUPTI through
torch.profiler), outputs stay on the GPU, results equal ORT on CPU within TF32 tolerance, and through a real
tritonserver, CUDA-shared-memory inputs reach model.py on the GPU with no host copy.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests import graphs
from tests.paths import demo_onnx
from tests.repository import build_test_repository
from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

pytestmark = pytest.mark.gpu

# ORT's CUDA EP uses TF32 for fp32 GEMMs on Hopper: results differ from CPU fp32 in the last bits.
TF32 = {"rtol": 2e-3, "atol": 2e-3}


def cuda_runner(path: Path, stream: torch.cuda.Stream) -> IOBindingRunner:
    placement = Placement("cuda", 0, stream.cuda_stream)
    return IOBindingRunner(create_session(path, ModelOptions(), placement), placement)


def cpu_reference(path: Path, inputs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v.cpu().numpy() for k, v in inputs.items()}), strict=True))


def host_device_copies(run: object) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()  # type: ignore[operator]
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "HtoD" in e.name or "DtoH" in e.name]


def test_cuda_inputs_are_bound_without_host_copies_and_outputs_stay_on_gpu() -> None:
    stream = torch.cuda.Stream()
    runner = cuda_runner(demo_onnx(), stream)
    assert runner.session.get_providers()[0] == "CUDAExecutionProvider"
    x = torch.randn(100, 2010, device="cuda")
    with torch.cuda.stream(stream):
        runner.run({"np_script_embeddings": x})  # warm-up: cuBLAS handles, arena
        copies = host_device_copies(lambda: runner.run({"np_script_embeddings": x}))
        out = runner.run({"np_script_embeddings": x})["np_logits"]
    stream.synchronize()
    assert copies == [], f"host<->device copies during a run on CUDA tensors: {copies}"
    assert out.device.type == "cuda"
    want = cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    np.testing.assert_allclose(out.cpu().numpy(), want, **TF32)


def test_cpu_input_for_a_gpu_session_costs_exactly_one_host_to_device_copy() -> None:
    stream = torch.cuda.Stream()
    runner = cuda_runner(demo_onnx(), stream)
    with torch.cuda.stream(stream):
        out = runner.run({"np_script_embeddings": torch.randn(4, 2010)})["np_logits"]
    stream.synchronize()
    assert runner.stats.host_to_device_copies == 1
    assert out.device.type == "cuda"


def test_several_dtypes_and_a_data_dependent_shape_on_gpu(tmp_path: Path) -> None:
    stream = torch.cuda.Stream()
    inputs = {
        "a": torch.randn(5, 3, device="cuda").half(),
        "b": torch.randint(-9, 9, (5, 4), device="cuda"),
        "c": torch.rand(5, 2, device="cuda") > 0.5,
    }
    path = graphs.multi_io(tmp_path / "m.onnx")
    with torch.cuda.stream(stream):
        got = cuda_runner(path, stream).run(inputs)
    stream.synchronize()
    for name, want in cpu_reference(path, inputs).items():
        assert got[name].device.type == "cuda"
        np.testing.assert_array_equal(got[name].cpu().numpy(), want)
    nz_path = graphs.nonzero(tmp_path / "nz.onnx")
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0]], device="cuda")
    with torch.cuda.stream(stream):
        indices = cuda_runner(nz_path, stream).run({"x": x})["indices"]
    stream.synchronize()
    assert indices.device.type == "cuda"
    np.testing.assert_array_equal(indices.cpu().numpy(), cpu_reference(nz_path, {"x": x})["indices"])


def test_cuda_shm_inputs_reach_the_model_on_gpu_through_tritonserver(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    from client.cuda_shm import CudaShmIO
    from client.triton_client import infer, reference_outputs
    from triton_ort.local_server import LocalTritonServer

    repository = build_test_repository(tmp_path / "repository")
    x = np.random.default_rng(0).standard_normal((64, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG", "TRITON_ORT_COUNT_COPIES": "1"}
    with LocalTritonServer(repository, log_verbose=1, env=debug) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        loaded = len(server.log())  # the warm-up runs at load log execute lines too
        layout = {"np_logits": (np.dtype(np.float32), (64, 2))}
        with CudaShmIO(client, "demo", {"np_script_embeddings": x}, layout) as shm:
            shm.infer()
            from_shm = shm.read_outputs()["np_logits"]
        over_grpc = infer(client, "demo", {"np_script_embeddings": x}, ["np_logits"])[0]["np_logits"]
        log = server.log()
        requests_log = log[loaded:]
    print("\n".join(line for line in log.splitlines() if "triton_ort" in line or "model.py" in line))
    np.testing.assert_allclose(from_shm, want, **TF32)
    np.testing.assert_allclose(over_grpc, want, **TF32)
    assert re.search(r"providers \['CUDAExecutionProvider'", log), "the demo did not load on the CUDA EP"
    executes = re.findall(
        r"execute: \d+ request\(s\), inputs on \[(.*?)\] -> \d+ ORT run\(s\), (\d+) host", requests_log
    )
    assert executes[0] == ("'cuda:0'", "0"), f"CUDA-shm request: {executes[0]}"  # on the GPU, no host copy
    assert executes[1] == ("'cpu'", "1"), f"numpy request: {executes[1]}"  # body tensors arrive on the CPU
    # CUPTI's count of every host<->device memcpy in the model process during each execute():
    cupti = re.findall(r"host<->device copies \(CUPTI\): (\d+)", requests_log)
    assert cupti[:2] == ["0", "1"], f"CUPTI copy counts (CUDA-shm request, numpy request): {cupti}"
