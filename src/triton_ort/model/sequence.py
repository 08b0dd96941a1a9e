"""The sequence batcher's control inputs (START, END, READY, CORRID), and what of sequence batching
Triton's python backend can serve.

Triton's sequence batcher adds each control input to every request it schedules, as a tensor of shape [1]
([1, 1] with max_batch_size > 0; core r23.12 sequence_batch_scheduler.cc, the control tensors'
`tensor_shape{1}`), so such a tensor is a model input that config.pbtxt lists under
`sequence_batching { control_input }`, never under `input`.

Implicit state (`sequence_batching { state }`) is refused: the sequence batcher hands the state's input to
the model, but only a backend calling TRITONBACKEND_StateNew / TRITONBACKEND_StateUpdate can write it
back (core backend_model.cc), and Triton's python backend calls neither (python_backend r23.12 to main).
The state would stay at its initial value and every step of a sequence would be answered as its first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

# Which field of a control says the tensor's type (model_config.proto, ModelSequenceBatching.Control).
_FALSE_TRUE_TYPES = {"int32_false_true": "INT32", "fp32_false_true": "FP32", "bool_false_true": "BOOL"}


@dataclass(frozen=True)
class ControlInput:
    """One control input: its tensor name, its kind (CONTROL_SEQUENCE_START, ...) and its wire type."""

    name: str
    kind: str
    data_type: str


def _control_type(control: Mapping[str, Any]) -> str:
    for field, wire in _FALSE_TRUE_TYPES.items():
        if control.get(field):
            return wire
    return str(control.get("data_type") or "TYPE_INVALID").removeprefix("TYPE_")


def control_inputs(model_config: Mapping[str, Any]) -> dict[str, ControlInput]:
    """The sequence batcher's control inputs, by tensor name (none without a sequence batcher)."""
    sequence = model_config.get("sequence_batching") or {}
    found = {}
    for entry in sequence.get("control_input", []):
        for control in entry.get("control", []):
            name = str(entry["name"])
            found[name] = ControlInput(name, str(control.get("kind", "")), _control_type(control))
    return found


def state_inputs(model_config: Mapping[str, Any]) -> tuple[str, ...]:
    """The input names of sequence_batching.state (implicit state), none without it."""
    sequence = model_config.get("sequence_batching") or {}
    return tuple(str(state.get("input_name")) for state in sequence.get("state", []))


def check_sequence_batching(states: tuple[str, ...]) -> None:
    """Raise ConfigError for what of sequence batching this backend cannot serve: implicit state (the
    state inputs, state_inputs)."""
    if states:
        raise ConfigError(
            f"sequence_batching.state (implicit state, inputs {list(states)}) is not served: Triton's python "
            "backend cannot write a sequence's state back (it has no TRITONBACKEND_StateUpdate), so every "
            "request would see the initial state. Serve the state as an ordinary input and output that the "
            "client sends back with the next request, with the control inputs (START, END, READY, CORRID) "
            "under sequence_batching.control_input; or use the native onnxruntime backend"
        )
