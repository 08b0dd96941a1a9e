"""The adapter's in-flight path (backend/model.py), over a stand-in for the python backend's classes: every
request of an execute is read before any is queued, an unreadable one becomes its own error, and an answer
that Triton's tensors refuse still reaches its client, as an error with the FINAL flag."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import numpy as np
import pytest

FINAL = 1


class _Tensor:
    def __init__(self, name: str, array: Any) -> None:
        if isinstance(array, np.ndarray) and array.dtype == np.float16:
            raise ValueError("this stand-in refuses float16")  # as pb_utils refuses what it cannot carry
        self.name_, self.array = name, array

    def name(self) -> str:
        return self.name_

    def is_cpu(self) -> bool:
        return True

    def as_numpy(self) -> Any:
        if isinstance(self.array, Exception):
            raise self.array
        return self.array


class _TritonError:
    INVALID_ARG, INTERNAL, UNAVAILABLE, CANCELLED = "INVALID_ARG", "INTERNAL", "UNAVAILABLE", "CANCELLED"

    def __init__(self, message: str, code: str) -> None:
        self.message, self.code = message, code


class _InferenceResponse:
    def __init__(self, output_tensors: list[Any], error: Any = None) -> None:
        self.output_tensors, self.error = output_tensors, error


class _Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[_InferenceResponse, int]] = []

    def send(self, response: _InferenceResponse, flags: int) -> None:
        self.sent.append((response, flags))


class _Request:
    def __init__(self, **inputs: Any) -> None:
        self._inputs = [_Tensor(name, value) for name, value in inputs.items()]
        self.sender = _Sender()

    def inputs(self) -> list[_Tensor]:
        return self._inputs

    def get_response_sender(self) -> _Sender:
        return self.sender

    def is_cancelled(self) -> bool:
        return False


class _Instance:
    """What the adapter asks of a ModelInstance on this path; keeps what is submitted."""

    on_numpy = True
    metrics = None
    plan = types.SimpleNamespace(max_batch_size=8)

    def __init__(self) -> None:
        self.submitted: list[Any] = []

    def submit(self, *pending: Any) -> None:
        self.submitted.extend(pending)


@pytest.fixture()
def adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    stub = types.ModuleType("triton_python_backend_utils")
    stub.Tensor = _Tensor  # type: ignore[attr-defined]
    stub.InferenceResponse = _InferenceResponse  # type: ignore[attr-defined]
    stub.TritonError = _TritonError  # type: ignore[attr-defined]
    stub.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    monkeypatch.delitem(sys.modules, "triton_ort.backend.model", raising=False)
    return importlib.import_module("triton_ort.backend.model")


def _model(adapter: types.ModuleType) -> tuple[Any, _Instance]:
    model = adapter.TritonPythonModel()
    model.instance = _Instance()
    return model, model.instance


def test_every_request_is_queued_and_an_unreadable_one_carries_its_own_error(
    adapter: types.ModuleType,
) -> None:
    model, instance = _model(adapter)
    good = _Request(x=np.ones((3, 4), np.float32))
    broken = _Request(x=RuntimeError("shared memory went away"))
    model._queue([good, broken, good])
    assert len(instance.submitted) == 3
    assert [p.rows for p in instance.submitted] == [3, 1, 3]
    error = instance.submitted[1].tensors
    assert isinstance(error, adapter.InferenceError) and "shared memory went away" in str(error)
    assert instance.submitted[0].tensors["x"].shape == (3, 4)


def test_an_answer_triton_refuses_reaches_the_client_as_an_error(adapter: types.ModuleType) -> None:
    model, instance = _model(adapter)
    request = _Request(x=np.ones((1, 4), np.float32))
    model._queue([request])
    instance.submitted[0].send({"y": np.zeros((1, 2), np.float16)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is not None
    assert response.error.code == "INTERNAL" and "refuses float16" in response.error.message


def test_an_answer_goes_out_once_with_the_final_flag(adapter: types.ModuleType) -> None:
    model, instance = _model(adapter)
    request = _Request(x=np.ones((2, 4), np.float32))
    model._queue([request])
    instance.submitted[0].send({"y": np.ones((2, 2), np.float32)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is None
    assert response.output_tensors[0].array.shape == (2, 2)
