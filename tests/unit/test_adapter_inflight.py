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

from tests.support.pb_standin import FINAL, InferenceResponse, Request, Tensor, TritonError


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
    stub.Tensor = Tensor  # type: ignore[attr-defined]
    stub.InferenceResponse = InferenceResponse  # type: ignore[attr-defined]
    stub.TritonError = TritonError  # type: ignore[attr-defined]
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
    good = Request(x=np.ones((3, 4), np.float32))
    broken = Request(x=RuntimeError("shared memory went away"))
    model._queue([good, broken, good])
    assert len(instance.submitted) == 3
    assert [p.rows for p in instance.submitted] == [3, 1, 3]
    error = instance.submitted[1].tensors
    assert isinstance(error, adapter.InferenceError) and "shared memory went away" in str(error)
    assert instance.submitted[0].tensors["x"].shape == (3, 4)


def test_an_answer_triton_refuses_reaches_the_client_as_an_error(adapter: types.ModuleType) -> None:
    model, instance = _model(adapter)
    request = Request(x=np.ones((1, 4), np.float32))
    model._queue([request])
    instance.submitted[0].send({"y": np.zeros((1, 2), np.float16)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is not None
    assert response.error.code == "INTERNAL" and "refuses float16" in response.error.message


def test_an_answer_goes_out_once_with_the_final_flag(adapter: types.ModuleType) -> None:
    model, instance = _model(adapter)
    request = Request(x=np.ones((2, 4), np.float32))
    model._queue([request])
    instance.submitted[0].send({"y": np.ones((2, 2), np.float32)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is None
    assert response.output_tensors[0].array.shape == (2, 2)
