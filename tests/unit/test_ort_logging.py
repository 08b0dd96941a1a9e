"""ORT's own log lines follow our logger's level: its warnings only when debugging, its errors always.

ORT writes to the process's file descriptor 2 (not sys.stderr), so these tests read it with capfd."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support import graphs
from triton_ort import ModelOptions, Placement, create_session
from triton_ort.runtime.session import ORT_ERROR, ORT_FATAL, ORT_WARNING, _session_options, ort_log_severity

# ORT's warning for an initializer no node reads (graph.cc CleanUnusedInitializersAndNodeArgs), logged at
# every session creation of such a model: a warning any ORT build gives, with or without a GPU.
UNUSED_WARNING = "Removing initializer 'unused'"


@pytest.fixture
def unused_initializer(tmp_path: Path) -> Path:
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "unused_initializer",
        [v("x", TensorProto.FLOAT, ["batch", 2])],
        [v("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[numpy_helper.from_array(np.zeros(1, np.float32), "unused")],
    )
    return graphs.save(graph, tmp_path / "model.onnx")


@pytest.fixture
def level() -> Iterator[logging.Logger]:
    """The library's logger, its level restored afterwards (and ORT's default logger with it)."""
    logger = logging.getLogger("triton_ort")
    before = logger.level
    yield logger
    logger.setLevel(before)
    ort.set_default_logger_severity(ort_log_severity())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("DEBUG", ORT_WARNING),
        ("INFO", ORT_ERROR),
        ("WARNING", ORT_ERROR),
        ("ERROR", ORT_ERROR),
        ("CRITICAL", ORT_FATAL),
    ],
)
def test_severity_follows_our_level(level: logging.Logger, name: str, expected: int) -> None:
    level.setLevel(name)
    assert ort_log_severity() == expected
    assert _session_options(ModelOptions()).log_severity_level == expected


def test_ort_warnings_stay_off_stderr_at_our_default_level(
    level: logging.Logger, unused_initializer: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    level.setLevel(logging.INFO)  # the backend's level inside Triton unless TRITON_ORT_LOG_LEVEL says
    create_session(unused_initializer, ModelOptions(), Placement("cpu"))
    printed = capfd.readouterr()
    assert UNUSED_WARNING not in printed.err + printed.out
    assert "\x1b" not in printed.err + printed.out  # ORT colours its lines whether or not fd 2 is a terminal


def test_ort_warnings_show_when_debugging(
    level: logging.Logger, unused_initializer: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    level.setLevel(logging.DEBUG)
    create_session(unused_initializer, ModelOptions(), Placement("cpu"))
    assert UNUSED_WARNING in capfd.readouterr().err


def test_an_ort_error_still_shows_at_our_default_level(
    level: logging.Logger, unused_initializer: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    level.setLevel(logging.INFO)
    session_options = _session_options(ModelOptions())
    # a configuration ORT refuses, logging an error before it raises (inference_session.cc)
    session_options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(Exception, match="disabled fallback to the CPU EP"):
        ort.InferenceSession(str(unused_initializer), session_options, providers=["CPUExecutionProvider"])
    assert "[E:onnxruntime" in capfd.readouterr().err


def test_the_default_logger_follows_too(
    level: logging.Logger, unused_initializer: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A session that leaves its own severity unset (-1) logs at the default logger's, the logger that
    writes ORT's provider lookup warning: create_session sets it from our level as well."""
    level.setLevel(logging.INFO)
    create_session(unused_initializer, ModelOptions(), Placement("cpu"))
    capfd.readouterr()
    ort.InferenceSession(str(unused_initializer), ort.SessionOptions(), providers=["CPUExecutionProvider"])
    assert UNUSED_WARNING not in capfd.readouterr().err
    level.setLevel(logging.DEBUG)
    create_session(unused_initializer, ModelOptions(), Placement("cpu"))
    capfd.readouterr()
    ort.InferenceSession(str(unused_initializer), ort.SessionOptions(), providers=["CPUExecutionProvider"])
    assert UNUSED_WARNING in capfd.readouterr().err
