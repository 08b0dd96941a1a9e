"""Pre- and post-processing hooks: Python that runs around the ONNX model inside the same execute().

A model may ship a Python module beside its ONNX file (config.pbtxt parameter `hooks: "hooks.py"`, a path
relative to the version directory) that defines either or both of

    def preprocess(inputs: Tensors) -> Tensors: ...            # client inputs -> the session's inputs
    def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors: ...   # session outputs -> client outputs

on dicts of torch tensors. This module is that contract: the hooks' types, the module loaded and checked
(`Hooks.load`), and what clients send and receive around them (`ClientSpecs`, from config.pbtxt; what the
module declares is model/hooks_file.py's, which imports the file). The runtime runs them:
runtime/hooked_runner.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import TritonOrtError
from ..model.dtypes import from_triton_type
from ..model.hooks_file import HookTensors, hook_functions, import_hooks_file, read_declarations
from ..model.options import ModelOptions
from ..model.served_config import ConfigTensor, ServedConfig
from ..model.signature import Dim, Tensors, TensorSpec

if TYPE_CHECKING:
    pass

# torch is the hooks' own import (a hooks module that imports it without torch installed fails to load,
# naming the module): this module reads and checks hooks without importing it. Hooks take and return
# torch tensors by name (Tensors, model/signature.py).


class Preprocess(Protocol):
    """`preprocess(inputs) -> inputs`: the client's tensors (one request, or a gathered batch) in, the
    ONNX session's inputs out. Raise `triton_ort.InputError` to reject the request as the client's fault."""

    def __call__(self, inputs: Tensors, /) -> Tensors: ...


class Postprocess(Protocol):
    """`postprocess(outputs, inputs) -> outputs`: the session's outputs and the client's inputs (the
    same tensors preprocess saw) in, the outputs config.pbtxt declares out, batch axis first."""

    def __call__(self, outputs: Tensors, inputs: Tensors, /) -> Tensors: ...


class HookError(TritonOrtError):
    """A hook raised, or returned something that does not fit: the model's fault, not the client's."""


@dataclass(frozen=True)
class ClientSpecs:
    """config.pbtxt's inputs and outputs: what clients send and receive when hooks sit in between."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batched: bool  # max_batch_size > 0: every tensor has a leading batch axis
    optional: tuple[TensorSpec, ...] = ()
    """Inputs a request may leave out (`optional: true`): preprocess gets only what was sent."""

    @classmethod
    def from_config(cls, config: ServedConfig) -> ClientSpecs:
        batch: tuple[Dim, ...] = ("batch",) if config.batched else ()

        def specs(kind: str, entries: Sequence[ConfigTensor]) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(
                    name=entry.name,
                    element_type=from_triton_type(entry.data_type, f"config {kind} {entry.name!r}"),
                    shape=batch + tuple(None if d < 0 else d for d in entry.dims),
                )
                for entry in entries
            )

        required = [entry for entry in config.inputs if not entry.optional]
        optional = [entry for entry in config.inputs if entry.optional]
        return cls(
            specs("input", required),
            specs("output", config.outputs),
            config.batched,
            specs("input", optional),
        )


@dataclass(frozen=True)
class Hooks:
    """The hook functions of one model, loaded from its hooks module."""

    path: Path
    preprocess: Preprocess | None
    postprocess: Postprocess | None
    declared: HookTensors | None = None
    """The client tensors the module declares (INPUTS, OUTPUTS: model/hooks_file.py), None without."""

    def name(self, function: str) -> str:
        """How messages name a hook: module path and function."""
        return f"{self.path}:{function}"

    @classmethod
    def load(cls, path: Path) -> Hooks:
        """Import the module at `path` and check it (model/hooks_file.py); ConfigError names the file and
        what is wrong with it."""
        module = import_hooks_file(path)
        declared = read_declarations(module, path)
        preprocess, postprocess = hook_functions(module, path)
        return cls(path, preprocess, postprocess, declared)


def load_hooks(version_dir: Path, options: ModelOptions) -> Hooks | None:
    """The model's hooks module (parameter `hooks`, relative to the version directory), imported and
    checked; None without one. The load and `triton-ort config` call it alike."""
    if not options.hooks:
        return None
    return Hooks.load(version_dir / options.hooks)
