"""ORT's own retry: when a provider fails at session creation, ORT's Python API prints "EP Error ..." and
retries with fewer providers (or a CUDA provider with default options). Those retries are caught here."""

from __future__ import annotations

import logging

import onnxruntime as ort
import pytest

from tests.support.paths import demo_onnx
from triton_ort import ModelOptions, Placement
from triton_ort.runtime.providers import diagnose_missing_cuda_provider
from triton_ort.runtime.session import (
    _new_session,
    cuda_options_not_applied,
    cuda_provider_options,
    ep_error_of,
)


@pytest.mark.filterwarnings("ignore:Specified provider 'NoSuchProvider'")
def test_the_error_of_orts_retry_is_caught_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    # An unknown provider makes real ORT take the same retry path as a CUDA provider that fails to start.
    with caplog.at_level(logging.WARNING, logger="triton_ort"):
        session, ep_error = _new_session(
            demo_onnx(), ModelOptions(), ["NoSuchProvider", "CPUExecutionProvider"]
        )
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert ep_error == "Unknown Provider Type: NoSuchProvider"
    assert "Falling back to ['CPUExecutionProvider']" in caplog.text  # logged, not printed to stdout
    assert not session._enable_fallback  # and a failure while running raises instead of re-running on CPU


def test_no_retry_no_error() -> None:
    session, ep_error = _new_session(demo_onnx(), ModelOptions(), ["CPUExecutionProvider"])
    assert ep_error == ""
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_ep_error_of_reads_orts_notice() -> None:
    printed = (
        "*************** EP Error ***************\n"
        "EP Error [ONNXRuntimeError] : 1 : FAIL : Unknown provider option: fuse_conv_bias when using "
        "[('CUDAExecutionProvider', {'device_id': '0'}), 'CPUExecutionProvider']\n"
        "Falling back to ['CUDAExecutionProvider', 'CPUExecutionProvider'] and retrying.\n"
    )
    assert ep_error_of(printed) == "[ONNXRuntimeError] : 1 : FAIL : Unknown provider option: fuse_conv_bias"
    assert ep_error_of("something else\n") == ""


# What get_provider_options() reports for a CUDA provider ORT created with its defaults (the forms of
# CUDAExecutionProviderInfo::ToProviderOptions), and for one created with our options on device 1.
DEFAULT_CUDA = {
    "device_id": "0",
    "has_user_compute_stream": "0",
    "user_compute_stream": "0",
    "do_copy_in_default_stream": "1",
    "arena_extend_strategy": "kNextPowerOfTwo",
    "gpu_mem_limit": "18446744073709551615",
}


def test_a_default_cuda_provider_is_not_ours() -> None:
    asked = cuda_provider_options(ModelOptions(), Placement("cuda", 1, 0x7F00DEAD))
    assert cuda_options_not_applied(DEFAULT_CUDA, asked) == {
        "device_id": ("1", "0"),
        "has_user_compute_stream": ("1", "0"),
        "user_compute_stream": (str(0x7F00DEAD), "0"),
    }


def test_our_cuda_provider_is_ours() -> None:
    asked = cuda_provider_options(ModelOptions(), Placement("cuda", 1, 0x7F00DEAD))
    effective = {
        **DEFAULT_CUDA,
        "device_id": "1",
        "has_user_compute_stream": "1",
        "user_compute_stream": str(0x7F00DEAD),
    }
    assert cuda_options_not_applied(effective, asked) == {}
    # an option ORT does not report back is not judged
    assert cuda_options_not_applied({"device_id": "1"}, asked) == {}
    # stream 0 (torch's legacy default stream) is "no user stream" to ORT, and that is what was asked
    on_default_stream = cuda_provider_options(ModelOptions(), Placement("cuda", 0, 0))
    assert cuda_options_not_applied(DEFAULT_CUDA, on_default_stream) == {}


def test_the_diagnosis_names_orts_error() -> None:
    diagnosis = diagnose_missing_cuda_provider("Unknown provider option: fuse_conv_bias")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        assert "could not start the CUDA provider: Unknown provider option: fuse_conv_bias" in diagnosis
    else:  # without the provider built in, that is the cause
        assert "this onnxruntime build has no CUDA provider" in diagnosis
