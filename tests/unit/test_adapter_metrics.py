"""The adapter (backend/model.py) and its custom metrics (parameter custom_metrics): `auto` makes them at
the first execute where the python backend has a response sender for the model (24.06 and later, which
restart no dead stub), and none where it has not (23.12, where the stub's metric messages made the server
crash while restarting a killed stub: docs/reliability.md); `true` and `false` force it. A real CPU
instance of the demo, over a stand-in for the python backend's classes that records the metric families
the model makes."""

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
from tests.support.pb_standin import InferenceResponse, Request, Tensor, TritonError


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
        "TRITONSERVER_RESPONSE_COMPLETE_FINAL": 1,
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
