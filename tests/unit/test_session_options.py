"""Options reach ONNX Runtime: session options, provider lists and provider options."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from tests.support.paths import demo_onnx
from triton_ort import ModelOptions, Placement, ProviderError, create_session
from triton_ort.runtime.providers import (
    CPU_EP,
    CUDA_EP,
    OPENVINO_EP,
    TENSORRT_EP,
    diagnose_missing_tensorrt_provider,
)
from triton_ort.runtime.session import _session_options, requested_providers

TRT = ModelOptions(tensorrt_options={"trt_fp16_enable": "1", "trt_engine_cache_enable": "1"})


def test_session_options_carry_the_native_parameters() -> None:
    options = ModelOptions(
        graph_optimization_level="extended",
        execution_mode="parallel",
        intra_op_num_threads=3,
        inter_op_num_threads=2,
        enable_mem_arena=False,
        enable_mem_pattern=False,
        use_device_allocator_for_initializers=True,
    )
    session_options = _session_options(options)
    assert session_options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert session_options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert (session_options.intra_op_num_threads, session_options.inter_op_num_threads) == (3, 2)
    assert (session_options.enable_cpu_mem_arena, session_options.enable_mem_pattern) == (False, False)
    assert session_options.get_session_config_entry("session.use_device_allocator_for_initializers") == "1"


def test_unset_memory_options_leave_ort_defaults() -> None:
    session_options = _session_options(ModelOptions())
    assert (session_options.enable_cpu_mem_arena, session_options.enable_mem_pattern) == (True, True)


def test_tensorrt_comes_first_on_the_instance_device_and_stream_then_cuda() -> None:
    providers = requested_providers(TRT, Placement("cuda", 1, 4242))
    assert [p if isinstance(p, str) else p[0] for p in providers] == [TENSORRT_EP, CUDA_EP, CPU_EP]
    trt = providers[0][1]
    assert isinstance(trt, dict)
    assert trt["trt_fp16_enable"] == "1" and trt["device_id"] == "1"
    assert (trt["has_user_compute_stream"], trt["user_compute_stream"]) == ("1", "4242")


def test_cuda_accelerator_options_reach_the_cuda_ep_but_not_over_ours() -> None:
    options = ModelOptions(
        cuda_options={"cudnn_conv_use_max_workspace": "0"}, cudnn_conv_algo_search="DEFAULT"
    )
    providers = requested_providers(options, Placement("cuda", 0, 7))
    cuda = providers[0][1]
    assert isinstance(cuda, dict)
    assert cuda["cudnn_conv_use_max_workspace"] == "0"
    assert (cuda["cudnn_conv_algo_search"], cuda["user_compute_stream"]) == ("DEFAULT", "7")


def test_cpu_instances_ask_for_no_gpu_provider() -> None:
    assert requested_providers(TRT, Placement("cpu")) == [CPU_EP]
    assert requested_providers(ModelOptions(openvino=True), Placement("cpu")) == [
        (OPENVINO_EP, {"device_type": "CPU"}),
        CPU_EP,
    ]


def test_native_session_options_load_a_cpu_session() -> None:
    options = ModelOptions(
        execution_mode="parallel", enable_mem_pattern=False, graph_optimization_level="disable"
    )
    session = create_session(demo_onnx(), options, Placement("cpu"))
    assert session.get_providers() == [CPU_EP]


@pytest.mark.skipif(OPENVINO_EP in ort.get_available_providers(), reason="this onnxruntime has OpenVINO")
def test_openvino_without_its_build_fails_with_the_fix() -> None:
    with pytest.raises(
        ProviderError, match=r"has no OpenVINOExecutionProvider\. Fix: install onnxruntime-openvino"
    ):
        create_session(demo_onnx(), ModelOptions(openvino=True), Placement("cpu"))


@pytest.mark.skipif(TENSORRT_EP in ort.get_available_providers(), reason="this onnxruntime has TensorRT")
def test_tensorrt_diagnosis_names_the_missing_provider_and_the_fallback_knob() -> None:
    message = diagnose_missing_tensorrt_provider()
    assert "has no TensorrtExecutionProvider" in message
    assert "this onnxruntime build has no TensorRT provider" in message
    assert 'allow_cuda_fallback: "true"' in message


def test_spinning_is_set_only_where_asked() -> None:
    assert (
        _session_options(ModelOptions(allow_spinning=False)).get_session_config_entry(
            "session.intra_op.allow_spinning"
        )
        == "0"
    )
    with pytest.raises(RuntimeError, match="does not have configuration"):  # unset: ORT's own default
        _session_options(ModelOptions()).get_session_config_entry("session.intra_op.allow_spinning")
