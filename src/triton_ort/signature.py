"""The ONNX file's inputs and outputs, and their check against config.pbtxt at load time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .dtypes import ElementType, from_onnx_type, from_triton_type
from .errors import ConfigError

Dim = int | str | None  # a static size, a symbolic axis name, or unknown


class NodeArgLike(Protocol):
    name: str
    type: str
    shape: Sequence[Any]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    element_type: ElementType
    shape: tuple[Dim, ...]


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


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _compare(kind: str, spec: TensorSpec, entry: Mapping[str, Any], max_batch_size: int) -> list[str]:
    problems = []
    where = f"{kind} {spec.name!r}"
    config_type = from_triton_type(str(entry.get("data_type", "")), f"config {where}")
    if config_type != spec.element_type:
        problems.append(
            f"{where}: config says {config_type.triton_name}, "
            f"the ONNX file says {spec.element_type.triton_name} ({spec.element_type.onnx_name})"
        )
    dims = [int(d) for d in entry.get("dims", [])]
    batch: list[int] = [-1] if max_batch_size > 0 else []
    config_shape = batch + dims
    if len(config_shape) != len(spec.shape):
        problems.append(
            f"{where}: config shape {config_shape} (max_batch_size {max_batch_size}, dims {dims}) has rank "
            f"{len(config_shape)}, the ONNX file's {_shape_text(spec.shape)} has rank {len(spec.shape)}"
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
            f"(config dims should be {_shape_text(spec.shape[len(batch) :])})"
        )
    return problems


def check_config(
    model_config: Mapping[str, Any],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> None:
    """Raise ConfigError listing every difference between config.pbtxt and the ONNX file."""
    max_batch_size = int(model_config.get("max_batch_size", 0))
    problems: list[str] = []
    for kind, specs, entries, all_required in (
        ("input", inputs, model_config.get("input", []), True),
        ("output", outputs, model_config.get("output", []), False),
    ):
        by_name = {spec.name: spec for spec in specs}
        configured = {str(entry["name"]): entry for entry in entries}
        for name in configured.keys() - by_name.keys():
            problems.append(
                f"config {kind} {name!r} is not in the ONNX file, whose {kind}s are {sorted(by_name)}"
            )
        if all_required:
            for name in by_name.keys() - configured.keys():
                problems.append(f"ONNX {kind} {name!r} is missing from config.pbtxt")
        for name in configured.keys() & by_name.keys():
            problems += _compare(kind, by_name[name], configured[name], max_batch_size)
    if problems:
        raise ConfigError(
            "config.pbtxt does not match the ONNX file:\n  - " + "\n  - ".join(sorted(problems))
        )
