"""What the reliability tests share beyond the harness (triton_ort.harness): the demo's tensors and its
reference answer, and the measurements printed at the end of the run."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.support.paths import SERVER_TOLERANCE, demo_onnx
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.transport import Answer

DEMO_INPUT = "np_script_embeddings"
DEMO_OUTPUT = "np_logits"

MEASUREMENTS: list[str] = []
"""Numbers the tests measured (recovery time, memory, ...), printed in pytest's terminal summary."""


def measured(text: str) -> None:
    MEASUREMENTS.append(text)
    print(text)


def demo_reference(x: NDArray[Any]) -> NDArray[Any]:
    return reference_outputs(demo_onnx(), {DEMO_INPUT: x})[DEMO_OUTPUT]


def assert_demo_answer(answer: Answer, x: NDArray[Any]) -> None:
    assert answer.ok, f"a good request failed: {answer.status} {answer.message}"
    assert answer.outputs is not None
    np.testing.assert_allclose(answer.outputs[DEMO_OUTPUT], demo_reference(x), **SERVER_TOLERANCE)
