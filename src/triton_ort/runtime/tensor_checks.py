"""Run-time checks of tensors against TensorSpecs, in one wording: the runner's inputs against the ONNX
file's, and the hooks' tensors against config.pbtxt's inputs and outputs.

Requests repeat a few signatures (names, dtypes, shapes), so callers check a signature in full once and
cache it: `signature_of` is the cache key, taken on every request, and allocates only its tuples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..model.dtypes import ElementType
from ..model.signature import TensorSpec, shape_text

Signature = tuple[tuple[str, Any, tuple[int, ...]], ...]
"""Names, dtypes (torch's or numpy's) and shapes of a request's tensors."""


def signature_of(tensors: Mapping[str, Any]) -> Signature:
    return tuple((name, tensor.dtype, tensor.shape) for name, tensor in tensors.items())  # Size: a tuple


def _dtype_fits(tensor: Any, want: ElementType) -> bool:
    """A string spec takes a numpy array of strings (Triton's BYTES: objects); a numeric spec a torch tensor
    or a numpy array of its dtype (either runs on either runner's arrays: arrays.py)."""
    if isinstance(tensor, np.ndarray):
        return tensor.dtype.kind in "OSU" if want.is_string else tensor.dtype == want.numpy_dtype
    return not want.is_string and tensor.dtype == want.torch_dtype


def _dtype_text(want: ElementType, tensor: Any) -> str:
    """What was expected, in the terms of the array that came."""
    if want.is_string:
        return "BYTES"
    if isinstance(tensor, np.ndarray):
        return f"{want.triton_name} ({want.numpy_dtype or want.dtype_name})"
    return f"{want.triton_name} ({want.torch_dtype})"


def check_against_specs(
    specs: Sequence[TensorSpec],
    tensors: Mapping[str, Any],
    kind: str,
    optional: Sequence[TensorSpec] = (),
) -> None:
    """Raise InputError naming the tensor (`kind`: 'input' or 'output'), what was expected and what came,
    unless `tensors` have exactly the names (those of `specs`, and any of `optional`: inputs with a
    default, ONNX Runtime's overridable initializers), dtypes (_dtype_fits) and fixed axes of their specs."""
    expected = {spec.name for spec in specs}
    may_take = {spec.name for spec in optional}
    unknown, missing = sorted(tensors.keys() - expected - may_take), sorted(expected - tensors.keys())
    if unknown or missing:
        pairs = (("unknown", unknown), ("missing", missing))
        wrong = [f"{what} {kind}(s) {names}" for what, names in pairs if names]
        known = f"the model's {kind}s are {sorted(expected)}"
        if may_take:
            known += f", and it may take {sorted(may_take)} (each has a default)"
        raise InputError(f"{', '.join(wrong)}; {known}")
    given = [spec for spec in optional if spec.name in tensors]
    for spec in (*specs, *given):
        tensor = tensors[spec.name]
        want = spec.element_type
        if not _dtype_fits(tensor, want):
            raise InputError(
                f"{kind} {spec.name!r}: expected {_dtype_text(want, tensor)}, got {tensor.dtype}"
            )
        shape = tuple(tensor.shape)
        fits = len(shape) == len(spec.shape) and all(
            not isinstance(d, int) or d == n for d, n in zip(spec.shape, shape, strict=True)
        )
        if not fits:
            raise InputError(
                f"{kind} {spec.name!r}: expected shape {shape_text(spec.shape)}, got {list(shape)}"
            )


def check_shared_axes(specs: Sequence[TensorSpec], tensors: Mapping[str, Any]) -> None:
    """Axes that the model names alike (e.g. 'batch') must have one size across the inputs; output
    shapes are derived from them."""
    seen: dict[str, tuple[str, int]] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.shape):
            if not isinstance(dim, str):
                continue
            size = int(tensors[spec.name].shape[axis])
            first = seen.setdefault(dim, (spec.name, size))
            if first[1] != size:
                raise InputError(
                    f"inputs {first[0]!r} and {spec.name!r} must agree on axis {dim!r}: "
                    f"got {first[1]} and {size}"
                )


def served_outputs(outputs: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """`outputs` as config.pbtxt serves them: those it names, in its order (an ONNX file may have more)."""
    return {name: outputs[name] for name in names if name in outputs}
