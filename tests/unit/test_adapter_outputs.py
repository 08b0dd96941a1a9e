"""How the adapter hands outputs to Triton: host tensors as numpy views (no copy), device tensors and
dtypes numpy lacks through DLPack, strings as numpy arrays (CHANGELOG.md, numpy views of host outputs)."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import numpy as np
import pytest
import torch


class _Tensor:
    """The part of pb_utils.Tensor the adapter uses: built from a numpy array, or from a DLPack capsule."""

    def __init__(self, name: str, array: np.ndarray[Any, Any] | None, capsule: Any = None) -> None:
        self.name, self.array, self.capsule = name, array, capsule

    @classmethod
    def from_dlpack(cls, name: str, capsule: Any) -> _Tensor:
        return cls(name, None, capsule)


class _InferenceResponse:
    def __init__(self, output_tensors: list[Any], error: Any = None) -> None:
        self.output_tensors, self.error = output_tensors, error


@pytest.fixture()
def adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    stub = types.ModuleType("triton_python_backend_utils")
    stub.Tensor = _Tensor  # type: ignore[attr-defined]
    stub.InferenceResponse = _InferenceResponse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    monkeypatch.delitem(sys.modules, "triton_ort.backend.model", raising=False)
    return importlib.import_module("triton_ort.backend.model")


def test_a_host_output_is_a_numpy_view_of_its_buffer(adapter: types.ModuleType) -> None:
    buffer = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    rows = torch.split(buffer, [2, 4])[1]  # one request's rows of a gathered run
    (output,) = adapter._response({"y": rows}).output_tensors
    assert output.capsule is None and output.name == "y"
    assert output.array.shape == (4, 2) and output.array.dtype == np.float32
    assert np.shares_memory(output.array, buffer.numpy())  # no copy
    np.testing.assert_array_equal(output.array, rows.numpy())


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float16, torch.uint8])
def test_every_numpy_dtype_goes_as_numpy(adapter: types.ModuleType, dtype: torch.dtype) -> None:
    (output,) = adapter._response({"y": torch.zeros(3, dtype=dtype)}).output_tensors
    assert output.capsule is None and output.array.dtype == torch.zeros(0, dtype=dtype).numpy().dtype


def test_bfloat16_has_no_numpy_form_and_goes_through_dlpack(adapter: types.ModuleType) -> None:
    (output,) = adapter._response({"y": torch.zeros(3, dtype=torch.bfloat16)}).output_tensors
    assert output.array is None and output.capsule is not None


def test_strings_stay_the_numpy_array_they_are(adapter: types.ModuleType) -> None:
    strings = np.array([b"a", b"bc"], dtype=object)
    (output,) = adapter._response({"s": strings}).output_tensors
    assert output.array is strings
