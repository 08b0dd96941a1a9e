"""The adapter (backend/model.py) makes its custom metrics unless the config says `custom_metrics: false`:
off, the stub sends the server no metric message at all, which on Triton 2.41 is what made the server's
crash while restarting a killed stub nearly certain (docs/reliability.md). A real CPU instance of the demo,
over a stand-in for the python backend's classes that records the metric families the model makes."""

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


@pytest.mark.parametrize("custom_metrics", [None, "false"])
def test_custom_metrics_are_made_unless_the_config_turns_them_off(
    adapter: types.ModuleType, custom_metrics: str | None
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
        (response,) = model.execute([Request(np_script_embeddings=np.ones((2, 2010), np.float32))])
        assert response.error is None and response.output_tensors[0].array.shape == (2, 2)
        if custom_metrics == "false":
            assert _Family.made == [] and model.instance.metrics is None
        else:
            assert "triton_ort_executes_total" in _Family.made and model.instance.metrics is not None
    finally:
        model.finalize()
