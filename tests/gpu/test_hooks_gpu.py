"""Hooks and the model-to-model hand-off on a real GPU: run on the GPU test host, skipped elsewhere.

In-process: the hooks run on the instance's device and CUDA stream, no host<->device copy happens around
them (CUPTI), and the answers equal the same ops in numpy around ORT on CPU. Through tritonserver: an
upstream torch model feeds the ONNX classifier on the GPU through BLS with no host copy on the way, the
ensemble route is measured (where its tensors travel), and a non-contiguous upstream tensor is refused
with the python backend's clear error.
"""

from __future__ import annotations

import re
import shutil
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests.support.hooks_support import (
    EXAMPLE,
    HANDOFF_REPOSITORY,
    example_config,
    expected_logits,
    expected_top_k,
    raw_features,
)
from tests.support.paths import Tolerance, demo_onnx
from triton_ort import ModelInstance
from triton_ort.harness.repository import read_config, write_config
from triton_ort.runtime.copy_counter import cupti_counts_from_log
from triton_ort.runtime.hooked_runner import HookedRunner
from triton_ort.runtime.stats import ExecuteStats

pytestmark = pytest.mark.gpu
T = TypeVar("T")
TF32: Tolerance = {"rtol": 2e-3, "atol": 2e-3}  # ORT's CUDA EP computes fp32 GEMMs in TF32 on Hopper

# The example's hooks plus a record of where they ran.
RECORDING_HOOKS = (EXAMPLE / "1" / "hooks.py").read_text() + textwrap.dedent(
    """
    SEEN = []
    _example_preprocess, _example_postprocess = preprocess, postprocess

    def _where(hook, tensor):
        SEEN.append((hook, str(tensor.device), torch.cuda.current_stream().cuda_stream))

    def preprocess(inputs):
        _where("preprocess", inputs["raw_embeddings"])
        return _example_preprocess(inputs)

    def postprocess(outputs, inputs):
        _where("postprocess", outputs["np_logits"])
        return _example_postprocess(outputs, inputs)
    """
)


def gpu_instance(tmp_path: Path, placement: str) -> ModelInstance:
    config = example_config()
    config["parameters"]["output_placement"] = {"string_value": placement}
    (tmp_path / "hooks.py").write_text(RECORDING_HOOKS)
    return ModelInstance(config, tmp_path, "GPU", 0)


def host_device_copies(run: Callable[[], object]) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "HtoD" in e.name or "DtoH" in e.name]


@pytest.mark.parametrize(("placement", "copies"), [("device", 0), ("host", 2)])
def test_hooks_run_on_the_instance_stream_with_no_copy_but_the_placed_outputs(
    tmp_path: Path, placement: str, copies: int
) -> None:
    instance = gpu_instance(tmp_path, placement)
    assert isinstance(instance.batch_runner, HookedRunner)
    seen = instance.batch_runner.hooks.preprocess.__globals__["SEEN"]  # type: ignore[union-attr]
    raws = [raw_features(rows, seed=rows) for rows in (3, 5)]
    requests = [{"raw_embeddings": torch.from_numpy(raw).cuda()} for raw in raws]
    instance.infer(requests)  # warm
    seen.clear()
    results: list[Any] = []
    names = host_device_copies(lambda: results.extend(instance.infer(requests)))
    assert len(names) == copies, names  # 'host': one device-to-host copy per output, nothing else
    stream = instance.lane.stream
    assert stream is not None
    assert seen == [
        ("preprocess", "cuda:0", stream.cuda_stream),
        ("postprocess", "cuda:0", stream.cuda_stream),
    ], "the hooks should run once for the gathered batch, on the instance's device and stream"
    for result, raw in zip(results, raws, strict=True):
        assert isinstance(result, dict), result
        assert result["top_scores"].device.type == ("cuda" if placement == "device" else "cpu")
        want = expected_top_k(raw)
        np.testing.assert_allclose(result["top_scores"].cpu().numpy(), want["top_scores"], **TF32)
        np.testing.assert_array_equal(result["top_classes"].cpu().numpy(), want["top_classes"])


STRIDED_GPU_UPSTREAM = """
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "x").to_dlpack()).cuda()
            strided = x.t().contiguous().t()  # the same values, column-major on the GPU
            try:
                capsule = torch.utils.dlpack.to_dlpack(strided)
                tensor = pb_utils.Tensor.from_dlpack("np_script_embeddings", capsule)
            except Exception as error:
                message = f"upstream could not hand the tensor over: {error}"
                error = pb_utils.TritonError(message)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            reply = pb_utils.InferenceRequest(
                model_name="classifier", requested_output_names=["np_logits"], inputs=[tensor]
            ).exec()
            outputs = reply.output_tensors()
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs, error=reply.error()))
        return responses
"""

STRIDED_GPU_CONFIG = """name: "strided_gpu_upstream"
backend: "python"
max_batch_size: 0
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1, 2010 ] } ]
output [ { name: "np_logits", data_type: TYPE_FP32, dims: [ -1, 2 ] } ]
instance_group [ { kind: KIND_GPU, count: 1 } ]
"""


def _wait_for(read: Callable[[], list[T]], count: int, timeout_s: float = 20.0) -> list[T]:
    deadline = time.monotonic() + timeout_s
    while len(found := read()) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_bls_handoff_stays_on_the_gpu_and_the_ensemble_route_is_measured(tmp_path: Path) -> None:
    """CUDA-shm input -> preprocess (torch, GPU) -> classifier (ours) through BLS: the classifier reads
    cuda:0 tensors and CUPTI counts no host<->device copy in its execute; the BLS answer comes back on the
    GPU. The same through classify_ensemble, where Triton's ensemble scheduler carries the tensor. And
    demo_hooks served on the GPU: hooks on the device, only its placed outputs copied."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_ort.cli.cuda_shm import CudaShmIO
    from triton_ort.harness.server import LocalTritonServer

    extra = tmp_path / "extra"
    (extra / "strided_gpu_upstream" / "1").mkdir(parents=True)
    shutil.copytree(EXAMPLE, extra / "demo_hooks")  # served on the GPU beside the hand-off
    config = read_config(extra / "demo_hooks")
    config.parameters["onnx_file"].string_value = str(demo_onnx())
    write_config(extra / "demo_hooks", config)
    (extra / "strided_gpu_upstream" / "1" / "model.py").write_text(textwrap.dedent(STRIDED_GPU_UPSTREAM))
    (extra / "strided_gpu_upstream" / "config.pbtxt").write_text(STRIDED_GPU_CONFIG)
    raw = raw_features(16, seed=3)
    want = expected_logits(raw)
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG", "TRITON_ORT_COUNT_COPIES": "1"}
    layout = {"np_logits": (np.dtype(np.float32), (16, 2))}
    answers = {}
    with LocalTritonServer(
        HANDOFF_REPOSITORY, log_verbose=1, env=debug, extra_args=[f"--model-repository={extra}"]
    ) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        loaded = len(server.log())
        for model in ("preprocess_bls", "classify_ensemble"):
            with CudaShmIO(client, model, {"raw_embeddings": raw}, layout) as shm:
                shm.infer()
                answers[model] = shm.read_outputs()["np_logits"]
        # Last, so that the records of the two routes come first: demo_hooks over CUDA shared memory.
        top_k: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] = {
            "top_scores": (np.dtype(np.float32), (16, 2)),
            "top_classes": (np.dtype(np.int64), (16, 2)),
        }
        with CudaShmIO(client, "demo_hooks", {"raw_embeddings": raw}, top_k) as shm:
            shm.infer()
            hooked = shm.read_outputs()
        executes = _wait_for(lambda: ExecuteStats.from_log(server.log()[loaded:]), 3)
        cupti = _wait_for(lambda: cupti_counts_from_log(server.log()[loaded:]), 3)
        x = np.random.default_rng(4).standard_normal((4, 2010)).astype(np.float32)
        item = grpcclient.InferInput("x", [4, 2010], "FP32")
        item.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("strided_gpu_upstream", [item])
        log = server.log()
    print("\n".join(line for line in log.splitlines() if "triton_ort" in line or "gpu_handoff" in line))
    for model, logits in answers.items():
        np.testing.assert_allclose(logits, want, **TF32, err_msg=model)
    bls, ensemble = executes[:2]
    print(f"classifier inputs: BLS route {bls.input_devices}, ensemble route {ensemble.input_devices}")
    assert bls.input_devices == ["cuda:0"], bls
    assert (bls.host_to_device_copies, bls.device_to_host_copies) == (0, 0), bls
    assert cupti[0] == {"HtoD": 0, "DtoH": 0}, f"CUPTI in the classifier, BLS route: {cupti}"
    assert "gpu_handoff: reply np_logits on GPU" in log, "the BLS answer came back in host memory"
    assert re.search(r"providers \['CUDAExecutionProvider'", log)
    assert ensemble.input_devices == ["cuda:0"], (
        f"the ensemble handed the classifier {ensemble.input_devices} tensors: it moved the GPU tensor "
        "through host memory (record this in docs/hooks.md)"
    )
    assert cupti[1] == {"HtoD": 0, "DtoH": 0}, f"CUPTI in the classifier, ensemble route: {cupti}"
    assert "DLPack tensor is not contiguous" in str(refused.value), refused.value
    # demo_hooks on the GPU: inputs read on the device, hooks and model there, and its small outputs
    # copied once each into pinned host memory (output_placement auto): exactly 2 device-to-host copies.
    expected = expected_top_k(raw)
    np.testing.assert_allclose(hooked["top_scores"], expected["top_scores"], **TF32)
    np.testing.assert_array_equal(hooked["top_classes"], expected["top_classes"])
    hooks_execute = executes[2]
    assert hooks_execute.input_devices == ["cuda:0"] and hooks_execute.outputs_on_host, hooks_execute
    assert (hooks_execute.host_to_device_copies, hooks_execute.device_to_host_copies) == (0, 2)
    assert cupti[2] == {"HtoD": 0, "DtoH": 2}, f"CUPTI in demo_hooks: {cupti}"
