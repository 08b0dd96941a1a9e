"""Whose error is it: the library's classes, the failure classifier, and the adapter's Triton error codes."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
import torch
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from tests.support import graphs
from tests.support.paths import DEMO_MODEL_PY
from triton_ort import (
    InferenceError,
    InputError,
    IOBindingRunner,
    Placement,
    TritonOrtError,
    Unavailable,
    run_requests,
    triton_code,
)
from triton_ort.runtime.ort_errors import classify_failure

GIB = 2**30


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InputError("bad shape"), "INVALID_ARG"),
        (InferenceError("kernel died"), "INTERNAL"),
        (Unavailable("busy"), "UNAVAILABLE"),
        (TritonOrtError("unreadable input"), "INTERNAL"),
        (RuntimeError("anything else"), "INTERNAL"),
    ],
)
def test_each_error_class_has_one_triton_code(error: Exception, code: str) -> None:
    assert triton_code(error) == code


def test_ort_invalid_argument_is_the_clients() -> None:
    error = ort_errors.InvalidArgument("Unexpected input data type. Actual: (tensor(double))")
    assert isinstance(classify_failure(error, 8 * GIB), InputError)


def test_allocation_larger_than_the_device_is_the_clients() -> None:
    error = ort_errors.Fail(
        "bfc_arena.cc:360 Failed to allocate memory for requested buffer of size 8796093022208"
    )
    classified = classify_failure(error, 140 * GIB)
    assert isinstance(classified, InputError)
    assert "needs a buffer of 8796093022208 bytes" in str(classified)


def test_allocation_that_fits_the_device_but_not_now_is_retryable() -> None:
    error = ort_errors.RuntimeException("Failed to allocate memory for requested buffer of size 2081488896")
    classified = classify_failure(error, 16 * GIB)
    assert isinstance(classified, Unavailable) and triton_code(classified) == "UNAVAILABLE"


def test_torch_out_of_memory_is_sized_from_its_message() -> None:
    huge = torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 4.00 TiB. GPU 0 has a total ..."
    )
    small = torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total ..."
    )
    assert isinstance(classify_failure(huge, 140 * GIB), InputError)
    assert isinstance(classify_failure(small, 140 * GIB), Unavailable)


def test_device_failure_inside_a_kernel_is_the_servers() -> None:
    error = RuntimeError(
        "Error in execution: Non-zero status code returned while running MatMul node. "
        "CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=0"
    )
    classified = classify_failure(error, 140 * GIB)
    assert type(classified) is InferenceError and triton_code(classified) == "INTERNAL"


@pytest.mark.parametrize("error", [ort_errors.RuntimeException("session state"), ort_errors.EPFail("EP")])
def test_other_ort_failures_are_the_servers(error: Exception) -> None:
    classified = classify_failure(error, 140 * GIB)
    assert type(classified) is InferenceError and "inference failed on the server" in str(classified)


def test_kernel_refusing_a_validated_requests_values_is_the_clients(tmp_path: Path) -> None:
    session = ort.InferenceSession(
        str(graphs.pairwise_add(tmp_path / "add.onnx")), providers=["CPUExecutionProvider"]
    )
    runner = IOBindingRunner(session, Placement("cpu"))
    unaddable = {"x": torch.ones(1, 3), "y": torch.ones(1, 4)}  # passes validation, ORT's Add refuses it
    [result] = run_requests(runner, [unaddable], gather=True)
    assert isinstance(result, InputError) and "could not compute this request's values" in str(result)


class _TritonError:
    """The part of pb_utils.TritonError the adapter uses: a message and a code constant."""

    INVALID_ARG, INTERNAL, UNAVAILABLE = "invalid-arg-constant", "internal-constant", "unavailable-constant"

    def __init__(self, message: str, code: str = INTERNAL) -> None:
        self.message, self.code = message, code


class _InferenceResponse:
    def __init__(self, output_tensors: list[Any], error: _TritonError | None = None) -> None:
        self.output_tensors, self.error = output_tensors, error


@pytest.fixture()
def demo_adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The adapter that model_repository/demo/1/model.py (and the onnxruntime_zerocopy backend) re-exports,
    imported afresh against a stub of triton_python_backend_utils."""
    stub = types.ModuleType("triton_python_backend_utils")
    stub.TritonError = _TritonError  # type: ignore[attr-defined]
    stub.InferenceResponse = _InferenceResponse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    assert "triton_ort.backend.model" in DEMO_MODEL_PY.read_text()  # the demo's file is this adapter
    monkeypatch.delitem(sys.modules, "triton_ort.backend.model", raising=False)
    return importlib.import_module("triton_ort.backend.model")


@pytest.mark.parametrize(
    ("error", "constant"),
    [
        (InputError("input 'x': expected shape [batch, 2010], got [2, 7]"), _TritonError.INVALID_ARG),
        (Unavailable("device memory is exhausted"), _TritonError.UNAVAILABLE),
        (InferenceError("the device failed"), _TritonError.INTERNAL),
    ],
)
def test_adapter_answers_each_failure_with_its_triton_code(
    demo_adapter: types.ModuleType, error: Exception, constant: str
) -> None:
    response = demo_adapter._response(error)
    assert response.output_tensors == []
    assert response.error.code == constant
    assert response.error.message == str(error)
