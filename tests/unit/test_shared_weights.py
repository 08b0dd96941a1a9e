"""Weights shared between sessions (runtime/session.py shared_weights): sessions given the same initializers
answer as a session of their own, and use those very buffers (a change to one shows in both), which is how
the lanes of a GPU instance in flight hold the model's weights once (docs/inflight.md)."""

from __future__ import annotations

import numpy as np

from tests.support.paths import demo_onnx
from triton_ort import ModelOptions, Placement, create_session
from triton_ort.model.onnx_files import initializer_arrays
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
