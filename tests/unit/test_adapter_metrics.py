"""The adapter (backend/model.py) and its custom metrics (parameter custom_metrics): `auto` makes them at
the first execute where the python backend has a response sender for the model (24.06 and later, which
restart no dead stub), and none where it has not (23.12, where the stub's metric messages made the server
crash while restarting a killed stub: docs/reliability.md); `true` and `false` force it. A real CPU
instance of the demo, over a stand-in for the python backend's classes that records the metric families
the model makes. With it, the execution mode (runtime/execute.py), which the same first request decides."""

from __future__ import annotations

import importlib
import json
import logging
import sys
import types
from typing import Any, ClassVar

import numpy as np
import pytest

from tests.support.paths import DEMO_MAX_BATCH, demo_instance_config, demo_onnx
from tests.support.pb_standin import FINAL, InferenceResponse, Request, Tensor, TritonError
from triton_ort.runtime.execute import ClassicExecutor, InflightExecutor


class _Family:
    """pb_utils.MetricFamily: records each family made (each a message to the server)."""

    COUNTER, GAUGE = "counter", "gauge"
    made: ClassVar[list[str]] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        _Family.made.append(name)

    def Metric(self, labels: dict[str, str]) -> Any:
        return types.SimpleNamespace(increment=lambda value: None, set=lambda value: None)


class _Logger:
    log_error = log_warn = log_info = log_verbose = staticmethod(lambda message: None)


@pytest.fixture()
def adapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    stub = types.ModuleType("triton_python_backend_utils")
    for name, value in {
        "Tensor": Tensor,
        "InferenceResponse": InferenceResponse,
        "TritonError": TritonError,
        "MetricFamily": _Family,
        "Logger": _Logger,
        "TRITONSERVER_RESPONSE_COMPLETE_FINAL": FINAL,
    }.items():
        setattr(stub, name, value)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    monkeypatch.delitem(sys.modules, "triton_ort.backend.model", raising=False)
    # initialize routes the library's logging to the stand-in's Logger: put it back afterwards
    library = logging.getLogger("triton_ort")
    monkeypatch.setattr(library, "handlers", list(library.handlers))
    monkeypatch.setattr(library, "propagate", library.propagate)
    monkeypatch.setattr(library, "level", library.level)
    return importlib.import_module("triton_ort.backend.model")


class _RequestOf2341(Request):
    """A request of Triton 2.41's python backend: no response sender for a model that is not decoupled."""

    def get_response_sender(self) -> Any:
        raise RuntimeError("Response sender is not supported for non-decoupled models")


@pytest.mark.parametrize(
    ("custom_metrics", "release", "made"),
    [
        (None, "2.51", True),
        (None, "2.41", False),
        ("true", "2.41", True),
        ("false", "2.51", False),
    ],
)
def test_custom_metrics_are_on_where_no_dead_stub_is_restarted_unless_the_config_says(
    adapter: types.ModuleType, custom_metrics: str | None, release: str, made: bool
) -> None:
    _Family.made = []
    version = demo_onnx().parent
    parameters = {"custom_metrics": custom_metrics} if custom_metrics else {}
    model = adapter.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(demo_instance_config(DEMO_MAX_BATCH, **parameters)),
            "model_repository": str(version.parent),
            "model_version": version.name,
            "model_name": "demo",
            "model_instance_name": "demo_0",
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
        }
    )
    try:
        kind = Request if release == "2.51" else _RequestOf2341
        for _ in range(2):
            (response,) = model.execute([kind(np_script_embeddings=np.ones((2, 2010), np.float32))])
            assert response.error is None and response.output_tensors[0].array.shape == (2, 2)
        if made:
            assert "triton_ort_executes_total" in _Family.made and model.instance.metrics is not None
            assert len(_Family.made) == len(set(_Family.made)), "a family made twice"
        else:
            assert _Family.made == [] and model.instance.metrics is None
    finally:
        model.finalize()


def _initialized(adapter: types.ModuleType, **parameters: str) -> Any:
    version = demo_onnx().parent
    model = adapter.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(demo_instance_config(DEMO_MAX_BATCH, **parameters)),
            "model_repository": str(version.parent),
            "model_version": version.name,
            "model_name": "demo",
            "model_instance_name": "demo_0",
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
        }
    )
    return model


@pytest.mark.parametrize("release", ["2.51", "2.41"])
def test_the_first_execute_chooses_the_mode_once_and_later_executes_make_one_call(
    adapter: types.ModuleType, release: str
) -> None:
    model = _initialized(adapter, inflight_lanes="2", custom_metrics="false")
    assert model.execution.executor is None and len(model.instance.lanes) == 2
    kind = Request if release == "2.51" else _RequestOf2341
    requests = [kind(np_script_embeddings=np.ones((2, 2010), np.float32)) for _ in range(2)]
    try:
        answers = [model.execute([request]) for request in requests]
        executor: Any = model.execution.executor
        assert model.execution.execute == executor.execute  # chosen: execute() calls it directly
        in_flight = isinstance(executor, InflightExecutor)
        lanes = len(model.instance.lanes)
    finally:
        model.finalize()  # answers what is still in flight
    if release == "2.51":
        assert in_flight and answers == [None, None] and lanes == 2
        for request in requests:
            ((response, flags),) = request.sender.sent
            assert flags == FINAL and response.output_tensors[0].array.shape == (2, 2)
    else:
        assert isinstance(executor, ClassicExecutor) and lanes == 1
        assert all(answer[0].output_tensors[0].array.shape == (2, 2) for answer in answers)


def test_without_lanes_or_an_auto_to_decide_the_classic_executor_is_chosen_at_initialize(
    adapter: types.ModuleType,
) -> None:
    model = _initialized(adapter, custom_metrics="false")
    try:
        assert isinstance(model.execution.executor, ClassicExecutor)
        assert model.execution.execute == model.execution.executor.execute
    finally:
        model.finalize()
