"""The in-flight path (runtime/execute.py's InflightExecutor over backend/model.py's python backend), over
a stand-in for the python backend's classes: every request of an execute is read before any is queued, an
unreadable one becomes its own error, and an answer that Triton's tensors refuse still reaches its client,
as an error with the FINAL flag."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import numpy as np
import pytest

from tests.support.pb_standin import FINAL, InferenceResponse, Request, Tensor, TritonError
from triton_ort.errors import InferenceError
from triton_ort.runtime.execute import InflightExecutor


class _Instance:
    """What the in-flight executor asks of a ModelInstance when it queues and answers."""

    metrics = None
    plan = types.SimpleNamespace(max_batch_size=8)


class _Scheduler:
    """Keeps what is submitted, for the test to answer."""

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


def _executor(adapter: types.ModuleType) -> tuple[InflightExecutor, _Scheduler]:
    """The in-flight executor over the adapter's python backend (as initialize makes it), queueing into a
    recorder."""
    scheduler = _Scheduler()
    backend = adapter._python_backend(True, ("demo", "1", "demo_0"))
    return InflightExecutor(_Instance(), backend, scheduler), scheduler  # type: ignore[arg-type]


def test_every_request_is_queued_and_an_unreadable_one_carries_its_own_error(
    adapter: types.ModuleType,
) -> None:
    executor, instance = _executor(adapter)
    good = Request(x=np.ones((3, 4), np.float32))
    broken = Request(x=RuntimeError("shared memory went away"))
    executor.execute([good, broken, good])
    assert len(instance.submitted) == 3
    assert [p.rows for p in instance.submitted] == [3, 1, 3]
    error = instance.submitted[1].tensors
    assert isinstance(error, InferenceError) and "shared memory went away" in str(error)
    assert instance.submitted[0].tensors["x"].shape == (3, 4)


def test_an_answer_triton_refuses_reaches_the_client_as_an_error(adapter: types.ModuleType) -> None:
    executor, instance = _executor(adapter)
    request = Request(x=np.ones((1, 4), np.float32))
    executor.execute([request])
    instance.submitted[0].send({"y": np.zeros((1, 2), np.float16)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is not None
    assert response.error.code == "INTERNAL" and "refuses float16" in response.error.message


def test_an_answer_goes_out_once_with_the_final_flag(adapter: types.ModuleType) -> None:
    executor, instance = _executor(adapter)
    request = Request(x=np.ones((2, 4), np.float32))
    executor.execute([request])
    instance.submitted[0].send({"y": np.ones((2, 2), np.float32)})
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error is None
    assert response.output_tensors[0].array.shape == (2, 2)
