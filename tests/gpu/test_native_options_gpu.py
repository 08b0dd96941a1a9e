"""The native vocabulary on a CUDA host: the cuda accelerator's options reach a working CUDA EP session on
the instance's stream, and the tensorrt accelerator either runs or fails the load with its cause."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from tests.support.paths import demo_onnx
from triton_ort import IOBindingRunner, ModelOptions, Placement, ProviderError, create_session
from triton_ort.harness.reference import reference_outputs
from triton_ort.model.options import parse_options
from triton_ort.runtime.providers import CUDA_EP, TENSORRT_EP

pytestmark = pytest.mark.gpu


def run_demo(options: ModelOptions) -> tuple[list[str], NDArray[Any]]:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream)
    session = create_session(demo_onnx(), options, placement)
    runner = IOBindingRunner(session, placement)
    x = torch.rand(8, 2010)
    with torch.cuda.stream(stream):
        out = runner.run({"np_script_embeddings": x})["np_logits"]
    stream.synchronize()
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x.numpy()})["np_logits"]
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=2e-3, atol=2e-3)
    return session.get_providers(), out.cpu().numpy()


def test_cuda_accelerator_options_load_and_answer() -> None:
    options = parse_options(
        {"cudnn_conv_algo_search": "1", "arena_extend_strategy": "1", "gpu_mem_limit": "4294967296"},
        {
            "graph": {"level": 1},
            "execution_accelerators": {
                "gpu_execution_accelerator": [
                    {"name": "cuda", "parameters": {"cudnn_conv_use_max_workspace": "1", "use_tf32": "0"}}
                ]
            },
        },
    )
    providers, _ = run_demo(options)
    assert providers[0] == CUDA_EP


def test_tensorrt_runs_or_fails_the_load_with_its_cause() -> None:
    trt = {
        "execution_accelerators": {
            "gpu_execution_accelerator": [
                {
                    "name": "tensorrt",
                    "parameters": {"precision_mode": "FP32", "max_workspace_size_bytes": "1073741824"},
                }
            ]
        }
    }
    try:
        providers, _ = run_demo(parse_options({}, trt))
    except ProviderError as error:
        message = str(error)
        assert "has no TensorrtExecutionProvider" in message and "cause:" in message, message
        assert "allow_cuda_fallback" in message
        providers, _ = run_demo(parse_options({"allow_cuda_fallback": "true"}, trt))
        assert TENSORRT_EP not in providers and providers[0] == CUDA_EP
    else:
        assert providers[0] == TENSORRT_EP
