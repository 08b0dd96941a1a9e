"""A model's hooks module as a file: imported and checked once (`import_hooks_file`, `hook_functions`), and
what it declares about the tensors its clients send and receive (`read_declarations`).

Here, below hooks/, because auto-complete and the load's checks (this package) read the file too: the
hooks' contract and what the runtime needs of them are hooks/module.py's, which builds on this.

A hook may rename, cast and reshape, so the ONNX file cannot tell what clients see. The hooks module says it
once, at module level, and auto-complete (the server's and `triton-ort config`'s) fills config.pbtxt from it:

    from triton_ort import ClientTensor

    INPUTS = {
        "raw": ("UINT8", [-1, 2010]),                        # (data type, shape)
        "temperature": ClientTensor("FP32", [-1, 1], optional=True),  # a request may leave it out
    }
    OUTPUTS = {"top_scores": ("FP32", [-1, 2]), "top_classes": ("INT64", [-1, 2])}

Data types are Triton's names ("FP32", or "TYPE_FP32"); a shape is the whole tensor's, batch axis included,
-1 for an open axis, as an ONNX file gives its shapes. So the batching rule is the one of a model without
hooks (autocomplete): every declared tensor with an open first axis makes the model batchable.

This module imports neither torch nor ONNX Runtime.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from ..errors import ConfigError
from .dtypes import from_triton_type
from .signature import Dim, TensorSpec

DECLARATION_HINT = (
    "INPUTS = {'raw': ('UINT8', [-1, 2010])} and OUTPUTS = {'scores': ('FP32', [-1, 2])} "
    "(data type, shape with -1 for an open axis; docs/hooks.md)"
)


@dataclass(frozen=True)
class ClientTensor:
    """One tensor of a hooks module's INPUTS or OUTPUTS: Triton's data type name, the whole shape (batch
    axis included, -1 for an open axis), and for an input whether a request may leave it out."""

    data_type: str
    shape: Sequence[int]
    optional: bool = False


@dataclass(frozen=True)
class HookTensors:
    """A hooks module's declarations, as specs (open axes are None)."""

    inputs: tuple[TensorSpec, ...]
    """The inputs every request sends."""
    optional: tuple[TensorSpec, ...]
    """The inputs a request may leave out."""
    outputs: tuple[TensorSpec, ...]


def _spec(name: object, value: object, where: str) -> tuple[TensorSpec, bool]:
    if isinstance(value, ClientTensor):
        declared = value
    elif isinstance(value, tuple) and len(value) == 2:
        declared = ClientTensor(*value)
    else:
        raise ConfigError(
            f"{where}: {name!r} must be (data type, shape) or triton_ort.ClientTensor, got {value!r}"
        )
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: tensor names must be non-empty strings, got {name!r}")
    if not isinstance(declared.data_type, str):
        raise ConfigError(f"{where}: {name!r} has data type {declared.data_type!r}, expected e.g. 'FP32'")
    element_type = from_triton_type(declared.data_type, f"{where} {name!r}")
    shape = declared.shape
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        raise ConfigError(f"{where}: {name!r} has shape {shape!r}, expected a list of ints (-1: open)")
    dims: list[Dim] = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < -1 or d == 0:
            raise ConfigError(
                f"{where}: {name!r} has shape {list(shape)!r}, expected positive ints or -1 (an open axis)"
            )
        dims.append(None if d == -1 else d)
    return TensorSpec(name, element_type, tuple(dims)), bool(declared.optional)


def _table(module: ModuleType, attribute: str, where: str) -> Mapping[Any, Any] | None:
    table = getattr(module, attribute, None)
    if table is None:
        return None
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(f"{where}: {attribute} must be a non-empty dict of name -> (data type, shape)")
    return table


def read_declarations(module: ModuleType, path: Path) -> HookTensors | None:
    """The module's INPUTS and OUTPUTS; None when it declares neither. ConfigError, naming the module and
    the tensor, for a declaration that cannot be read or that declares one side only."""
    inputs = _table(module, "INPUTS", f"hooks module {path}")
    outputs = _table(module, "OUTPUTS", f"hooks module {path}")
    if inputs is None and outputs is None:
        return None
    if inputs is None or outputs is None:
        missing = "INPUTS" if inputs is None else "OUTPUTS"
        raise ConfigError(
            f"hooks module {path} declares {'OUTPUTS' if inputs is None else 'INPUTS'} "
            f"but not {missing}; declare both, e.g. {DECLARATION_HINT}"
        )
    required: list[TensorSpec] = []
    optional: list[TensorSpec] = []
    for name, value in inputs.items():
        spec, is_optional = _spec(name, value, f"hooks module {path}: INPUTS")
        (optional if is_optional else required).append(spec)
    declared_outputs = []
    for name, value in outputs.items():
        spec, is_optional = _spec(name, value, f"hooks module {path}: OUTPUTS")
        if is_optional:
            raise ConfigError(f"hooks module {path}: OUTPUTS {name!r} is optional; only inputs may be")
        declared_outputs.append(spec)
    return HookTensors(tuple(required), tuple(optional), tuple(declared_outputs))


def undeclared_message(path: Path, missing: str = "inputs and outputs") -> str:
    """The one line for a hooked model whose clients' tensors nobody states (`missing`: what config.pbtxt
    lacks)."""
    return (
        f"hooks module {path} declares no client tensors and config.pbtxt lists no {missing}, so "
        f"clients could call nothing: declare them in {path}, e.g. {DECLARATION_HINT}, or write input and "
        "output entries in config.pbtxt"
    )


class HookedModel(Protocol):
    """What the load's checks read of a model's hooks (hooks.module.Hooks is one)."""

    @property
    def path(self) -> Path: ...

    @property
    def preprocess(self) -> object | None: ...

    @property
    def postprocess(self) -> object | None: ...

    @property
    def declared(self) -> HookTensors | None: ...


def import_hooks_file(path: Path) -> ModuleType:
    """Import the module at `path`; ConfigError names the file and what is wrong with it."""
    if not path.is_file():
        raise ConfigError(
            f"parameter 'hooks': {path} does not exist (the path is relative to the version directory)"
        )
    # A name of its own per file: two models' hooks.py must not replace each other in sys.modules.
    module_name = f"triton_ort_hooks_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(
            f"parameter 'hooks': {path} cannot be imported as a Python module (expected a .py file)"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise ConfigError(f"hooks module {path} failed to import: {type(error).__name__}: {error}") from error
    return module


def hook_functions(module: ModuleType, path: Path) -> tuple[Any, Any]:
    """The module's preprocess and postprocess (None where it lacks one); ConfigError where it defines
    neither, or one that cannot be called with its arguments."""
    functions = getattr(module, "preprocess", None), getattr(module, "postprocess", None)
    if functions == (None, None):
        raise ConfigError(
            f"hooks module {path} defines neither preprocess(inputs) nor postprocess(outputs, inputs)"
        )
    for hook, name, usage in zip(functions, ("preprocess", "postprocess"), _USAGES, strict=True):
        if hook is not None:
            _check_arity(hook, f"{path}:{name}", usage)
    return functions


_USAGES = ("preprocess(inputs)", "postprocess(outputs, inputs)")


def _check_arity(hook: Callable[..., Any], name: str, usage: str) -> None:
    try:
        inspect.signature(hook).bind(*range(usage.count(",") + 1))
    except TypeError:
        raise ConfigError(f"hook {name} must be callable as {usage}") from None
    except ValueError:  # a builtin without a signature: let the first call tell
        pass
