"""Run an ORT session on torch tensors with IO binding: inputs and outputs stay where they are.

Inputs are bound by pointer. Outputs whose shape follows from the inputs (static axes, or a symbolic axis
that also names an input axis, such as the batch) are allocated as torch tensors on the session's device and
bound by pointer, so ORT writes straight into memory torch owns. Their memory comes from torch's caching
allocator, which hands the same blocks back when shapes repeat; we do not keep and overwrite one buffer
ourselves, because a previous answer may still be on its way out through Triton when the next run starts.
Outputs with data-dependent shapes are allocated by ORT on the device and wrapped as torch tensors through
DLPack, again without a host copy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort
import torch
import torch.utils.dlpack

from .errors import InputError
from .session import Placement, session_placement
from .signature import Dim, TensorSpec, read_specs


@dataclass
class RunnerStats:
    """Counters a test or a debug log can read: how many ORT runs, how many host-to-device copies."""

    ort_runs: int = 0
    host_to_device_copies: int = 0
    ort_run_seconds: float = 0.0  # inside session.run_with_iobinding (kernels, and ORT's end-of-run sync)


@dataclass(frozen=True)
class _AxisSource:
    """An output axis whose size is taken from an input axis (they share a symbolic name)."""

    input_name: str
    axis: int


OutputDim = int | _AxisSource | None


def _plan_output_shape(spec: TensorSpec, inputs: Sequence[TensorSpec]) -> tuple[OutputDim, ...] | None:
    """How to compute each axis of an output from the inputs; None when some axis is data-dependent."""
    symbols: dict[str, _AxisSource] = {}
    for input_spec in inputs:
        for axis, dim in enumerate(input_spec.shape):
            if isinstance(dim, str):
                symbols.setdefault(dim, _AxisSource(input_spec.name, axis))
    plan: list[OutputDim] = []
    for dim in spec.shape:
        if isinstance(dim, int):
            plan.append(dim)
        elif isinstance(dim, str) and dim in symbols:
            plan.append(symbols[dim])
        else:
            return None
    return tuple(plan)


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class IOBindingRunner:
    """Runs one session on torch tensors. Not thread-safe: one runner per model instance."""

    def __init__(
        self, session: ort.InferenceSession, placement: Placement, pinned_staging: bool = True
    ) -> None:
        self.session = session
        self.pinned_staging = pinned_staging
        self.placement = session_placement(session, placement)
        self.device = torch.device(f"cuda:{self.placement.device_id}" if self.placement.is_cuda else "cpu")
        self.inputs = read_specs(session.get_inputs(), "input")
        self.outputs = read_specs(session.get_outputs(), "output")
        self._output_plans = {spec.name: _plan_output_shape(spec, self.inputs) for spec in self.outputs}
        # Requests can be concatenated along axis 0 only if every output's first axis is that same batch
        # axis; otherwise the joint output could not be split back (a size that merely equals the row
        # count would be split wrongly).
        self.outputs_follow_batch = all(
            plan and isinstance(plan[0], _AxisSource) and plan[0].axis == 0
            for plan in self._output_plans.values()
        )
        self._binding = session.io_binding()
        self.stats = RunnerStats()
        # A failed run can leave ORT's CUDA arena holding what it grabbed for it (a request that asked for
        # more than the GPU has once left 140 GB reserved). The next run then shrinks the arena back.
        self.arena_needs_shrink = False
        self._shrink_options: ort.RunOptions | None = None
        if self.placement.is_cuda:
            self._shrink_options = ort.RunOptions()
            self._shrink_options.add_run_config_entry(
                "memory.enable_memory_arena_shrinkage", f"gpu:{self.placement.device_id}"
            )
        # An empty tensor's data_ptr may be 0, which ORT rejects; bind this instead (never read: 0 elements).
        self._placeholder = torch.empty(8, dtype=torch.uint8, device=self.device)

    def validate(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Raise InputError naming the input, what was expected and what came."""
        expected = {spec.name for spec in self.inputs}
        unknown = sorted(tensors.keys() - expected)
        missing = sorted(expected - tensors.keys())
        if unknown:
            raise InputError(f"unknown input(s) {unknown}; the model's inputs are {sorted(expected)}")
        if missing:
            raise InputError(f"missing input(s) {missing}; the model's inputs are {sorted(expected)}")
        for spec in self.inputs:
            tensor = tensors[spec.name]
            want = spec.element_type
            if tensor.dtype != want.torch_dtype:
                raise InputError(
                    f"input {spec.name!r}: expected {want.triton_name} ({want.torch_dtype}), "
                    f"got {tensor.dtype}"
                )
            shape = tuple(tensor.shape)
            fits = len(shape) == len(spec.shape) and all(
                not isinstance(d, int) or d == n for d, n in zip(spec.shape, shape, strict=True)
            )
            if not fits:
                raise InputError(
                    f"input {spec.name!r}: expected shape {_shape_text(spec.shape)}, got {list(shape)}"
                )
        self._check_shared_axes(tensors)

    def _check_shared_axes(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Axes that the model names alike (e.g. 'batch') must have one size across the inputs; output
        shapes are derived from them."""
        seen: dict[str, tuple[str, int]] = {}
        for spec in self.inputs:
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

    def run(self, tensors: Mapping[str, torch.Tensor], validated: bool = False) -> dict[str, torch.Tensor]:
        """Validate (unless the caller just did), bind, run; every output is a torch tensor on the
        session's device."""
        if not validated:
            self.validate(tensors)
        # Keep the bound tensors referenced until run() returns: ORT holds only their pointers.
        bound = {name: self.to_device(tensor) for name, tensor in tensors.items()}
        for spec in self.inputs:
            self._bind_input(spec, bound[spec.name])
        preallocated = {}
        for spec in self.outputs:
            shape = self._output_shape(spec.name, bound)
            if shape is None:
                self._binding.bind_output(spec.name, self.placement.device_type, self.placement.device_id)
                continue
            tensor = torch.empty(shape, dtype=spec.element_type.torch_dtype, device=self.device)
            preallocated[spec.name] = tensor
            self._binding.bind_output(
                spec.name,
                self.placement.device_type,
                self.placement.device_id,
                spec.element_type.onnx_proto,
                list(shape),
                self._pointer(tensor),
            )
        started = time.perf_counter()
        shrink = self._shrink_options if self.arena_needs_shrink else None
        try:
            self.session.run_with_iobinding(self._binding, shrink)
        except Exception:
            self.arena_needs_shrink = self._shrink_options is not None
            raise
        self.arena_needs_shrink = False
        self.stats.ort_run_seconds += time.perf_counter() - started
        self.stats.ort_runs += 1
        if len(preallocated) == len(self.outputs):
            return preallocated
        produced = self._binding.get_outputs()
        return {
            spec.name: preallocated[spec.name] if spec.name in preallocated else _ortvalue_to_torch(value)
            for spec, value in zip(self.outputs, produced, strict=True)
        }

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # A CPU tensor for a GPU session costs exactly one host-to-device copy; no numpy round trip.
        if tensor.device == self.device:
            return tensor.contiguous()
        if self.device.type == "cuda" and tensor.device.type == "cpu":
            self.stats.host_to_device_copies += 1
            if self.pinned_staging:
                # Through torch's cached pinned host memory: the DMA runs at full speed and asynchronously
                # on the current stream; torch keeps the pinned block until that copy has completed.
                return tensor.contiguous().pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device).contiguous()

    def _pointer(self, tensor: torch.Tensor) -> int:
        return int(tensor.data_ptr()) if tensor.numel() else int(self._placeholder.data_ptr())

    def _bind_input(self, spec: TensorSpec, tensor: torch.Tensor) -> None:
        self._binding.bind_input(
            spec.name,
            self.placement.device_type,
            self.placement.device_id,
            spec.element_type.onnx_proto,
            list(tensor.shape),
            self._pointer(tensor),
        )

    def _output_shape(self, name: str, bound: Mapping[str, torch.Tensor]) -> tuple[int, ...] | None:
        plan = self._output_plans[name]
        if plan is None:
            return None
        return tuple(
            dim if isinstance(dim, int) else int(bound[dim.input_name].shape[dim.axis])  # type: ignore[union-attr]
            for dim in plan
        )


def _ortvalue_to_torch(value: Any) -> torch.Tensor:
    """An ORT-allocated output as a torch tensor that keeps the OrtValue alive, without a host copy."""
    c_value = value._ortvalue if hasattr(value, "_ortvalue") else value
    if hasattr(c_value, "to_dlpack"):
        return torch.utils.dlpack.from_dlpack(c_value.to_dlpack())
    if value.device_name().lower() == "cpu":
        return torch.from_numpy(value.numpy())
    return torch.as_tensor(_CudaArray(value), device="cuda")


class _CudaArray:
    """__cuda_array_interface__ over an OrtValue, for ORT builds without OrtValue.to_dlpack.

    torch.as_tensor keeps this object (and so the OrtValue) alive for as long as the tensor lives.
    """

    def __init__(self, value: Any) -> None:
        self._value = value
        element_type = value.element_type()
        self.__cuda_array_interface__ = {
            "shape": tuple(value.shape()),
            "typestr": _typestr(element_type),
            "data": (int(value.data_ptr()), False),
            "version": 3,
            "strides": None,
        }


def _typestr(numpy_type: Any) -> str:
    import numpy as np

    return str(np.dtype(numpy_type).str)
