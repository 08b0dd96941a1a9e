"""Weights shared between sessions (runtime/session.py shared_weights): sessions given the same initializers
answer as a session of their own, and use those very buffers (a change to one shows in both), which is how
the lanes of a GPU instance in flight hold the model's weights once (docs/inflight.md)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from tests.support.paths import demo_onnx
from triton_ort import ModelOptions, Placement, create_session
from triton_ort.model.onnx_files import initializer_arrays
from triton_ort.runtime.instance import _lane_weights
from triton_ort.runtime.session import shared_weights

INPUT = "np_script_embeddings"


def test_sessions_over_shared_weights_answer_as_their_own_and_use_them_in_place() -> None:
    path, cpu = demo_onnx(), Placement("cpu")
    weights = shared_weights(path, cpu)
    assert set(weights) == set(initializer_arrays(path)) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    x = np.random.default_rng(0).standard_normal((3, 2010)).astype(np.float32)
    own = create_session(path, ModelOptions(), cpu).run(None, {INPUT: x})[0]
    first, second = (create_session(path, ModelOptions(), cpu, weights) for _ in range(2))
    np.testing.assert_array_equal(first.run(None, {INPUT: x})[0], own)
    # the last layer's bias, moved by one in the shared buffer, moves both sessions' logits by one
    weights["2.bias"].update_inplace(weights["2.bias"].numpy() + 1.0)
    for session in (first, second):
        np.testing.assert_allclose(session.run(None, {INPUT: x})[0], own + 1.0, rtol=0, atol=1e-5)


def test_weights_that_onnx_runtime_would_refuse_fall_back_to_each_session_its_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ORT takes an initializer only over a buffer its user owns: on a GPU, `ortvalue_from_numpy(a, "cuda")`
    gave values ORT had allocated, and every instance with lanes failed at load. Here the values are made as
    ORT-allocated on the CPU (the same refusal, from the real add_initializer): the refusal is met where the
    weights are made, and the instance's lanes fall back to weights of their own, with a log line."""

    def allocated_by_ort(buffer: np.ndarray[Any, Any]) -> ort.OrtValue:
        value = ort.OrtValue.ortvalue_from_shape_and_type(buffer.shape, buffer.dtype, "cpu")
        value.update_inplace(buffer)
        return value

    monkeypatch.setattr(ort.OrtValue, "from_dlpack", staticmethod(allocated_by_ort))
    with pytest.raises(Exception, match="must be owned by the user"):
        shared_weights(demo_onnx(), Placement("cpu"))
    with caplog.at_level(logging.WARNING, logger="triton_ort.runtime.instance"):
        assert _lane_weights(demo_onnx(), Placement("cpu")) is None
    assert "each hold their own weights" in caplog.text and "owned by the user" in caplog.text
