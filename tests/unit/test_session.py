"""A GPU request on a machine whose ORT has no CUDA provider gets our diagnosis, not ORT's error."""

import logging
from pathlib import Path

import onnxruntime as ort
import pytest

from tests.support.paths import demo_onnx
from triton_ort import ConfigError, ModelOptions, Placement, ProviderError, create_session, parse_options
from triton_ort.runtime.providers import CUDA_EP
from triton_ort.runtime.session import cuda_provider_options

pytestmark = pytest.mark.skipif(
    CUDA_EP in ort.get_available_providers(), reason="this onnxruntime has the CUDA provider"
)


def test_cuda_requested_without_cuda_provider_fails_with_diagnosis() -> None:
    with pytest.raises(ProviderError) as caught:
        create_session(demo_onnx(), ModelOptions(), Placement("cuda", 0, None))
    message = str(caught.value)
    assert "has no CUDAExecutionProvider" in message
    assert "installed distributions: " in message and "onnxruntime==" in message
    assert "available providers: ['" in message
    assert "install onnxruntime-gpu" in message
    assert "allow_cpu_fallback" in message


def test_cpu_fallback_is_explicit_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="triton_ort"):
        session = create_session(demo_onnx(), ModelOptions(allow_cpu_fallback=True), Placement("cuda"))
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert "allow_cpu_fallback is set: running model.onnx on CPU" in caplog.text


def test_missing_onnx_file_is_named(tmp_path: pytest.TempPathFactory) -> None:
    with pytest.raises(ConfigError, match=r"ONNX file .*nothing\.onnx does not exist"):
        create_session(
            demo_onnx().parent / "nothing.onnx", ModelOptions(onnx_file="nothing.onnx"), Placement("cpu")
        )


def test_a_damaged_onnx_file_is_named_unreadable_with_ort_s_own_error_after_it(tmp_path: Path) -> None:
    """At load the same words as auto-complete and `triton-ort config` say, not ORT's INVALID_PROTOBUF
    alone."""
    damaged = tmp_path / "model.onnx"
    damaged.write_bytes(demo_onnx().read_bytes()[:1000])
    with pytest.raises(ConfigError) as caught:
        create_session(damaged, ModelOptions(), Placement("cpu"))
    message = str(caught.value)
    assert message.startswith(f"{str(damaged)!r} is not a readable ONNX file: "), message
    assert "INVALID_PROTOBUF" in message  # ORT's own words, as the detail


def test_cuda_options_carry_stream_device_and_copy_mode() -> None:
    options = cuda_provider_options(ModelOptions(gpu_mem_limit=1024), Placement("cuda", 1, 12345))
    assert options["device_id"] == "1"
    assert options["do_copy_in_default_stream"] == "1"
    assert options["user_compute_stream"] == "12345"
    assert options["gpu_mem_limit"] == "1024"


def test_cudnn_picks_convolution_algorithms_by_heuristic_unless_the_config_says_otherwise() -> None:
    """ORT's (and the native backend's) EXHAUSTIVE search served the convolutional pipelines 4.8-4.9x
    slower at c=16 than HEURISTIC, in steady state, where the gathered batch sizes vary (H100, 2026-12-06,
    docs/pipelines.md); a config that names a search keeps it."""
    default = cuda_provider_options(ModelOptions(), Placement("cuda", 0, 1))
    assert default["cudnn_conv_algo_search"] == "HEURISTIC"
    named = cuda_provider_options(parse_options({"cudnn_conv_algo_search": "0"}), Placement("cuda", 0, 1))
    assert named["cudnn_conv_algo_search"] == "EXHAUSTIVE"
