"""The ONNX file's inputs and outputs, and their check against config.pbtxt at load time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..errors import ConfigError
from .dtypes import ElementType, from_onnx_type, from_triton_type

if TYPE_CHECKING:
    from .served_config import ConfigTensor, ServedConfig
from .sequence import ControlInput, check_sequence_batching

Dim = int | str | None  # a static size, a symbolic axis name, or unknown

Tensors = Mapping[str, Any]
"""Tensors by name: a request's inputs, a run's outputs, what hooks take and return (torch tensors; numpy
arrays on a CPU instance without hooks, runtime/arrays.py; strings as numpy arrays of bytes). The one such
alias: the runtime, the hooks' contract and the package's `triton_ort.Tensors` all name this one."""


class NodeArgLike(Protocol):
    name: str
    type: str
    shape: Sequence[Any]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    element_type: ElementType
    shape: tuple[Dim, ...]


class OnnxSignature(NamedTuple):
    """An ONNX model's tensors (read from the file offline, autocomplete.read_onnx_signature, or from a
    loaded session, runtime.session.session_signature); `check_config(config, *signature)` checks a config
    against them."""

    inputs: tuple[TensorSpec, ...]
    """The inputs every request sends."""
    outputs: tuple[TensorSpec, ...]
    overridable: tuple[TensorSpec, ...]
    """The inputs a request may send (graph inputs with an initializer of their name, IR >= 4)."""


def _dim(value: Any) -> Dim:
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value:
        return value
    return None


def read_specs(node_args: Sequence[NodeArgLike], kind: str) -> tuple[TensorSpec, ...]:
    """ORT's NodeArgs (session.get_inputs()/get_outputs()) as TensorSpecs."""
    return tuple(
        TensorSpec(
            name=arg.name,
            element_type=from_onnx_type(arg.type, f"ONNX {kind} {arg.name!r}"),
            shape=tuple(_dim(d) for d in arg.shape),
        )
        for arg in node_args
    )


def one_value_per_request(spec: TensorSpec) -> bool:
    """Whether an overridable input (an ONNX input with an initializer of its name: a default the caller
    may replace) holds one value for a whole request: the ONNX file gives it no open first axis (a scalar,
    or a fixed size such as a threshold's [1]), so it cannot have a row per batch row. With max_batch_size
    > 0 Triton still puts a batch axis before it: the request sends the same value in each row, and the
    model gets that one value (ModelPlan.one_value_inputs). An overridable input with an open first axis
    (a `past` state [batch, ...]) is batched like any input."""
    return not spec.shape or isinstance(spec.shape[0], int)


def shape_text(shape: Sequence[Dim]) -> str:
    """A spec's shape as messages write it: [batch, 2010], '?' for an unknown axis."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _rank_fix(spec: TensorSpec, entry: ConfigTensor, max_batch_size: int) -> str:
    """The config line that serves a tensor whose config rank differs from the file's."""
    if not spec.shape:
        return (
            "; a scalar cannot be served without a batch axis (Triton refuses an empty reshape when "
            "max_batch_size is 0): export it with shape [1]"
        )
    if max_batch_size > 0 and len(spec.shape) == 1 and entry.reshape is None:
        # Only the batch axis: Triton refuses empty dims, so the native onnxruntime backend's form.
        return f'; write it as {{ name: "{spec.name}" ... dims: [ 1 ] reshape: {{ shape: [ ] }} }}'
    inner = [d if isinstance(d, int) else -1 for d in spec.shape[1 if max_batch_size > 0 else 0 :]]
    return f"; its dims should be {inner}" if inner else ""


def _compare(
    kind: str, spec: TensorSpec, entry: ConfigTensor, max_batch_size: int, batched: bool = True
) -> list[str]:
    """`batched`: False for an input of one value per request, whose config dims are its whole shape."""
    problems = []
    where = f"{kind} {spec.name!r}"
    config_type = from_triton_type(entry.data_type, f"config {where}")
    if config_type != spec.element_type:
        problems.append(
            f"{where}: config says {config_type.triton_name}, "
            f"the ONNX file says {spec.element_type.triton_name} ({spec.element_type.onnx_name})"
        )
    dims = list(entry.served_dims)
    if not batched and not spec.shape and dims == [1]:
        dims = []  # a scalar default: Triton refuses empty dims, and its one value is the scalar
    batch: list[int] = [-1] if max_batch_size > 0 and batched else []
    config_shape = batch + dims
    if len(config_shape) != len(spec.shape):
        named = "reshape" if entry.reshape is not None else "dims"
        fix = _rank_fix(spec, entry, max_batch_size if batched else 0)
        problems.append(
            f"{where}: config shape {config_shape} (max_batch_size {max_batch_size}, {named} {dims}) has "
            f"rank {len(config_shape)}, the ONNX file's {shape_text(spec.shape)} has rank "
            f"{len(spec.shape)}{fix}"
        )
        return problems
    if batch and isinstance(spec.shape[0], int):
        problems.append(
            f"{where}: max_batch_size {max_batch_size} needs a dynamic first axis, "
            f"but the ONNX file fixes it "
            f"to {spec.shape[0]} (export with a dynamic batch axis, or set max_batch_size 0)"
        )
    for axis, (want, onnx_dim) in enumerate(zip(config_shape, spec.shape, strict=True)):
        if axis < len(batch) or not isinstance(onnx_dim, int) or want == onnx_dim:
            continue
        problems.append(
            f"{where}: axis {axis} is {want} in config.pbtxt but {onnx_dim} in the ONNX file "
            f"(config dims should be {shape_text(spec.shape[len(batch) :])})"
        )
    return problems


def _compare_control(spec: TensorSpec, control: ControlInput, max_batch_size: int) -> list[str]:
    """A control input is a [1] tensor of the control's type ([batch, 1] when Triton batches)."""
    where = f"input {spec.name!r} (sequence_batching control {control.kind})"
    problems = []
    if control.data_type != spec.element_type.triton_name:
        problems.append(
            f"{where}: the control sends {control.data_type}, the ONNX file says "
            f"{spec.element_type.triton_name} ({spec.element_type.onnx_name})"
        )
    want: list[Dim] = ["batch", 1] if max_batch_size > 0 else [1]
    fits = (
        len(spec.shape) == len(want)
        and (spec.shape[-1] == 1 or not isinstance(spec.shape[-1], int))
        and (max_batch_size == 0 or not isinstance(spec.shape[0], int))
    )
    if not fits:
        problems.append(
            f"{where}: Triton sends it with shape {shape_text(want)}, the ONNX file's is "
            f"{shape_text(spec.shape)}"
        )
    return problems


def check_config(
    config: ServedConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    overridable: Sequence[TensorSpec] = (),
) -> None:
    """Raise ConfigError listing every difference between config.pbtxt and the ONNX file. `inputs` are
    the inputs every request must send; `overridable` the ones it may send (ONNX Runtime's overridable
    initializers), which config.pbtxt may list, as `optional: true` or not, or leave out."""
    max_batch_size = config.max_batch_size
    check_sequence_batching(config.state_inputs)
    controls = config.controls
    problems: list[str] = []
    for spec in inputs:
        if spec.name in controls:
            problems += _compare_control(spec, controls[spec.name], max_batch_size)
    required = [s for s in inputs if s.name not in controls]
    may_skip = {spec.name for spec in overridable}
    for kind, specs, entries in (
        ("input", [*required, *overridable], config.inputs),
        ("output", outputs, config.outputs),
    ):
        by_name = {spec.name: spec for spec in specs}
        configured = {entry.name: entry for entry in entries}
        for name in configured.keys() - by_name.keys():
            problems.append(
                f"config {kind} {name!r} is not in the ONNX file, whose {kind}s are {sorted(by_name)}"
            )
        if kind == "input":
            for name in by_name.keys() - configured.keys() - may_skip:
                problems.append(f"ONNX {kind} {name!r} is missing from config.pbtxt")
            for name in configured.keys() & by_name.keys() - may_skip:
                if configured[name].optional:
                    problems.append(
                        f"input {name!r} is optional in config.pbtxt, but the ONNX file needs it in every "
                        "request (only an input with an initializer of its name, a default ONNX Runtime "
                        "lets the request override, may be optional): remove `optional: true`"
                    )
        for name in configured.keys() & by_name.keys():
            spec = by_name[name]
            batched = kind == "output" or name not in may_skip or not one_value_per_request(spec)
            problems += _compare(kind, spec, configured[name], max_batch_size, batched)
    if problems:
        raise ConfigError(
            "config.pbtxt does not match the ONNX file:\n  - " + "\n  - ".join(sorted(problems))
        )
