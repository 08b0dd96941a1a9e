"""config.pbtxt as a load reads it, parsed once: Triton hands initialize() the completed model config as
JSON (args["model_config"], ModelConfig's fields by their proto names), and every check and the instance
take this one typed object instead of walking that JSON again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .options import parameters_from_model_config
from .sequence import ControlInput, control_inputs, state_inputs


@dataclass(frozen=True)
class ConfigTensor:
    """One `input` or `output` entry of config.pbtxt."""

    name: str
    data_type: str
    """Triton's name, e.g. TYPE_FP32; '' where the entry does not say (Triton then refuses it)."""
    dims: tuple[int, ...]
    """Without the batch axis when max_batch_size > 0; -1 for an open axis."""
    reshape: tuple[int, ...] | None
    """The entry's `reshape.shape`, None without one (an empty tuple is a reshape to no axes)."""
    optional: bool

    @property
    def served_dims(self) -> tuple[int, ...]:
        """The dims the model sees, without the batch axis: the reshape where there is one, else the dims.
        Triton applies a reshape itself, to inputs before they reach the backend and to outputs after
        (core r23.12 infer_request.cc Normalize, infer_response.cc Output::Reshape), as a change of shape
        only: the model gets and returns the reshaped tensors, no data moves."""
        return self.reshape if self.reshape is not None else self.dims

    @classmethod
    def parse(cls, entry: Mapping[str, Any]) -> ConfigTensor:
        reshape = entry.get("reshape")
        return cls(
            name=str(entry["name"]),
            data_type=str(entry.get("data_type", "")),
            dims=tuple(int(d) for d in entry.get("dims", [])),
            reshape=None if reshape is None else tuple(int(d) for d in reshape.get("shape", [])),
            optional=bool(entry.get("optional", False)),
        )


@dataclass(frozen=True)
class ServedConfig:
    """What a load needs of the model config: the batch axis, the tensors, the sequence batcher's
    controls and state, the parameters and the optimization section."""

    name: str
    max_batch_size: int
    inputs: tuple[ConfigTensor, ...]
    outputs: tuple[ConfigTensor, ...]
    controls: Mapping[str, ControlInput]
    """The sequence batcher's control inputs by tensor name: model inputs not listed under `input`."""
    state_inputs: tuple[str, ...]
    """sequence_batching.state's input names (implicit state, refused at load)."""
    parameters: Mapping[str, str]
    optimization: Mapping[str, Any]
    op_libraries: tuple[str, ...] = ()
    """model_operations.op_library_filename: custom-op libraries to register with ONNX Runtime, as given
    (custom_ops.py says how a path is found)."""

    @property
    def batched(self) -> bool:
        """Whether every request tensor has a leading batch axis (max_batch_size > 0)."""
        return self.max_batch_size > 0

    def with_tensors(
        self, inputs: tuple[ConfigTensor, ...] | None = None, outputs: tuple[ConfigTensor, ...] | None = None
    ) -> ServedConfig:
        """The same config with other inputs or outputs (a check of one side only)."""
        return replace(
            self,
            inputs=self.inputs if inputs is None else inputs,
            outputs=self.outputs if outputs is None else outputs,
        )

    @classmethod
    def parse(cls, model_config: Mapping[str, Any]) -> ServedConfig:
        return cls(
            name=str(model_config.get("name", "")),
            max_batch_size=int(model_config.get("max_batch_size", 0)),
            inputs=tuple(ConfigTensor.parse(entry) for entry in model_config.get("input", [])),
            outputs=tuple(ConfigTensor.parse(entry) for entry in model_config.get("output", [])),
            controls=control_inputs(model_config),
            state_inputs=state_inputs(model_config),
            parameters=parameters_from_model_config(model_config),
            optimization=model_config.get("optimization") or {},
            op_libraries=tuple(
                str(path)
                for path in (model_config.get("model_operations") or {}).get("op_library_filename", [])
            ),
        )
