"""Run an ORT session on torch tensors with IO binding: inputs and outputs stay where they are.

Inputs are bound by pointer. Outputs whose shape follows from the inputs (static axes, or a symbolic axis
that also names an input axis, such as the batch) are allocated as torch tensors on the session's device and
bound by pointer, so ORT writes straight into memory torch owns. Outputs with data-dependent shapes are
allocated by ORT on the device and wrapped as torch tensors through DLPack, again without a host copy.

Where the outputs go is decided per run (`OutputPlacement`). Handing a GPU tensor back through Triton's
python backend has a fixed cost (measured ~0.45 ms for a KB-size output on an H200, docs/benchmarks.md),
which a small output does not repay; such outputs are copied once into pinned host memory on the session's
stream. Device-placed outputs come from torch's caching allocator, which hands the same block back only
after the previous answer has been released by Triton; host-placed runs write into device buffers this
runner keeps (nothing outside sees them), and their host copies go into pinned buffers that are reused from
one execute to the next (the python backend has copied a response's outputs before the next execute).

An output binding is only redone when the pointer or the shape changed: with repeating shapes, the runner's
own buffers and the allocator's block reuse, a steady stream of requests rebinds no output. Inputs are
bound every run (ORT may keep a copy of an input taken at bind time).

On a CUDA session with a caller's stream, ORT does not synchronise at the end of a run: the caller
synchronises that stream once (ModelInstance.infer does), after the host copies are queued.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort
import torch
import torch.utils.dlpack

from .errors import ConfigError, InputError
from .options import DEFAULT_HOST_OUTPUT_MAX_BYTES
from .session import Placement, session_placement
from .signature import Dim, TensorSpec, read_specs
from .stats import RunnerStats


@dataclass(frozen=True)
class OutputPlacement:
    """Where a CUDA session's outputs go: 'device', 'host', or 'auto' (host when one run's output bytes are
    at most host_max_bytes). A CPU session's outputs are on the host anyway."""

    mode: str = "auto"
    host_max_bytes: int = DEFAULT_HOST_OUTPUT_MAX_BYTES


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
        self,
        session: ort.InferenceSession,
        placement: Placement,
        pinned_staging: bool = True,
        output_placement: OutputPlacement | None = None,
        cuda_graph: bool = False,
        arena_shrinkage: str = "",
    ) -> None:
        self.session = session
        self.pinned_staging = pinned_staging
        self.placement = session_placement(session, placement)
        self.output_placement = output_placement or OutputPlacement()
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
        self._bound_outputs: dict[str, tuple[int, tuple[int, ...]]] = {}  # name -> (pointer, shape)
        self._scratch: dict[str, torch.Tensor] = {}  # device buffers of host-placed runs, by output
        self._scratch_views: dict[str, torch.Tensor] = {}  # the last view of each, reused for its shape
        # Pinned host buffers for host-placed outputs, by output, and how much of each this execute used;
        # None until begin_execute() says when earlier outputs are consumed (until then: new each run).
        self._host_buffers: dict[str, torch.Tensor] = {}
        self._host_used: dict[str, int] | None = None
        self._host_first_views: dict[str, torch.Tensor] = {}  # the slice at offset 0, reused for its shape
        self._valid_signatures: set[tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]] = set()
        self.stats = RunnerStats()
        # A failed run can leave ORT's CUDA arena holding what it grabbed for it (a request that asked for
        # more than the GPU has once left 140 GB reserved). The next run then shrinks the arena back.
        self.arena_needs_shrink = False
        self._run_options, self._shrink_options = self._make_run_options(arena_shrinkage)
        self._graphs: _CudaGraphs | None = None
        if cuda_graph and self.placement.is_cuda:
            if any(plan is None for plan in self._output_plans.values()):
                raise ConfigError(
                    "cuda_graph needs every output's shape to follow from the inputs' shapes; this model "
                    "has outputs of data-dependent size. Set cuda_graph: false."
                )
            self._graphs = _CudaGraphs(self.device)
            self._shrink_options = None  # a captured graph keeps its memory; nothing to shrink
        # An empty tensor's data_ptr may be 0, which ORT rejects; bind this instead (never read: 0 elements).
        self._placeholder = torch.empty(8, dtype=torch.uint8, device=self.device)

    def _own_arenas(self, arena_shrinkage: str) -> str:
        """The configured shrinkage on this instance's arenas: a `gpu:N` entry means this instance's GPU
        (one config serves instances on several GPUs, and ORT fails a run that names an arena the session
        lacks), and none on a CPU instance."""
        entries = []
        for entry in filter(None, arena_shrinkage.split(";")):
            if not entry.startswith("gpu:"):
                entries.append(entry)
            elif self.placement.is_cuda:
                entries.append(f"gpu:{self.placement.device_id}")
        return ";".join(dict.fromkeys(entries))

    def _make_run_options(self, arena_shrinkage: str) -> tuple[ort.RunOptions | None, ort.RunOptions | None]:
        arena_shrinkage = self._own_arenas(arena_shrinkage)
        if not self.placement.is_cuda:
            if not arena_shrinkage:
                return None, None
            options = ort.RunOptions()
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
            return options, None
        options, shrink = ort.RunOptions(), ort.RunOptions()
        if arena_shrinkage:  # the config's memory.enable_memory_arena_shrinkage, on every run
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
        shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", f"gpu:{self.placement.device_id}")
        if self.placement.cuda_stream is not None:
            # ORT's end-of-run stream sync would be the first of two: the caller syncs the same stream
            # after queueing the host copies, so one wait covers kernels and copies.
            for run_options in (options, shrink):
                run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return options, shrink

    def validate(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Raise InputError naming the input, what was expected and what came."""
        # Requests repeat a few signatures (names, dtypes, shapes); each is checked in full once.
        signature = tuple((name, tensor.dtype, tuple(tensor.shape)) for name, tensor in tensors.items())
        if signature in self._valid_signatures:
            return
        self._check(tensors)
        if len(self._valid_signatures) < 1024:
            self._valid_signatures.add(signature)

    def _check(self, tensors: Mapping[str, torch.Tensor]) -> None:
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

    def run(
        self, tensors: Mapping[str, torch.Tensor], validated: bool = False, fresh: bool = False
    ) -> dict[str, torch.Tensor]:
        """Validate (unless the caller just did), bind, run. Outputs are torch tensors on the session's
        device, or in pinned host memory when the placement says so; on a CUDA session with a caller's
        stream they are complete once that stream is synchronised. `fresh`: the caller has just queued
        work on the stream that produces these inputs (a concatenation, a hook), so it is waited for
        before binding, as a staging copy is."""
        if not validated:
            self.validate(tensors)
        started = time.perf_counter()
        # Keep the bound tensors referenced until run() returns: ORT holds only their pointers.
        staged_before = self.stats.host_to_device_copies
        bound = {name: self.to_device(tensor) for name, tensor in tensors.items()}
        run_options, graphed = self._run_options, False
        if self._graphs is not None:  # a captured graph replays on the addresses it was captured with
            run_options, graphed = self._graphs.options_for(bound)
            if graphed:
                bound = {name: self._graphs.stage(name, tensor) for name, tensor in bound.items()}
        if (fresh or self.stats.host_to_device_copies != staged_before) and self.placement.is_cuda:
            # ORT copies an input it needs on the CPU at bind time, with a blocking copy on the legacy
            # stream, which does not wait for the staging copy (or the caller's kernels) just queued on ours.
            torch.cuda.current_stream(self.device).synchronize()
        for spec in self.inputs:
            # Inputs are bound every run, even at an unchanged address: ORT keeps its own copy of an input
            # it needs on another device, taken at bind time, so a skipped bind would reuse old values.
            self._bind(spec, bound[spec.name], is_input=True)
        shapes = {spec.name: self._output_shape(spec.name, bound) for spec in self.outputs}
        to_host = self._outputs_to_host(shapes)
        preallocated = {}
        for spec in self.outputs:
            shape = shapes[spec.name]
            if shape is None:
                self._bound_outputs.pop(spec.name, None)
                self._binding.bind_output(spec.name, self.placement.device_type, self.placement.device_id)
                continue
            if graphed:
                assert self._graphs is not None
                tensor = self._graphs.buffer(("output", spec.name), shape, spec.element_type.torch_dtype)
            elif to_host:
                tensor = self._scratch_output(spec, shape)
            else:
                tensor = self._new_output(spec, shape)
            preallocated[spec.name] = tensor
            self._bind(spec, tensor, is_input=False)
        ran = time.perf_counter()
        self.stats.bind_seconds += ran - started
        shrink = self.arena_needs_shrink and self._shrink_options is not None
        try:
            self.session.run_with_iobinding(self._binding, self._shrink_options if shrink else run_options)
            self.stats.arena_shrinks += int(shrink)
        except Exception:
            self.arena_needs_shrink = self._shrink_options is not None
            self._bound_outputs.clear()  # do not trust what a failed run left bound
            raise
        self.arena_needs_shrink = False
        finished = time.perf_counter()
        self.stats.ort_run_seconds += finished - ran
        self.stats.ort_runs += 1
        outputs = preallocated
        if len(preallocated) != len(self.outputs):
            produced = self._binding.get_outputs()
            outputs = {
                spec.name: preallocated[spec.name]
                if spec.name in preallocated
                else _ortvalue_to_torch(value, self.device)
                for spec, value in zip(self.outputs, produced, strict=True)
            }
        if not to_host:
            if graphed:  # the graph's buffers are written again by its next replay
                return {name: tensor.clone() for name, tensor in outputs.items()}
            return outputs
        host = {name: self._to_pinned_host(name, tensor) for name, tensor in outputs.items()}
        self.stats.host_output_runs += 1
        self.stats.device_to_host_seconds += time.perf_counter() - finished
        return host

    def _outputs_to_host(self, shapes: Mapping[str, tuple[int, ...] | None]) -> bool:
        if not self.placement.is_cuda or self.output_placement.mode == "device":
            return False
        if self.output_placement.mode == "host":
            return True
        if any(shape is None for shape in shapes.values()):
            return False  # data-dependent sizes: unknown before the run, so keep them on the device
        total = sum(
            math.prod(shapes[spec.name] or ()) * spec.element_type.torch_dtype.itemsize
            for spec in self.outputs
        )
        return total <= self.output_placement.host_max_bytes

    def _new_output(self, spec: TensorSpec, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.empty(shape, dtype=spec.element_type.torch_dtype, device=self.device)

    def _scratch_output(self, spec: TensorSpec, shape: tuple[int, ...]) -> torch.Tensor:
        """A view of this runner's own device buffer for that output, grown when a larger one is needed:
        it only lives until the host copy, so it can be reused by the next run (same pointer, no rebind)."""
        cached = self._scratch_views.get(spec.name)
        if cached is not None and cached.shape == shape:
            return cached  # the same view object: no tensor op on the way
        numel = math.prod(shape)
        buffer = self._scratch.get(spec.name)
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(max(numel, 1), dtype=spec.element_type.torch_dtype, device=self.device)
            self._scratch[spec.name] = buffer
        view = buffer[:numel].view(shape)
        self._scratch_views[spec.name] = view
        return view

    def begin_execute(self) -> None:
        """Declare that the outputs handed out so far have been consumed, so their host memory may be
        reused. Triton's python backend copies a response's outputs before it sends the instance its next
        execute(), so ModelInstance calls this at the start of each one."""
        self._host_used = {}

    def _to_pinned_host(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """One device-to-host copy into pinned memory, queued on the current stream (the session's)."""
        if tensor.device.type == "cpu":
            return tensor
        numel = tensor.numel()
        if self._host_used is None:
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        else:
            # Several runs of one execute take consecutive slices; a buffer too small is replaced by one
            # twice the size (slices already handed out keep the old one alive).
            used = self._host_used.get(name, 0)
            cached = self._host_first_views.get(name)
            if (
                used == 0
                and cached is not None
                and cached.shape == tensor.shape
                and cached.dtype == tensor.dtype
            ):
                host = cached  # the usual case, one run per execute: no tensor op but the copy
            else:
                buffer = self._host_buffers.get(name)
                if buffer is None or buffer.dtype != tensor.dtype or buffer.numel() < used + numel:
                    buffer = torch.empty(max(2 * (used + numel), 1), dtype=tensor.dtype, pin_memory=True)
                    self._host_buffers[name], used = buffer, 0
                    self._host_first_views.pop(name, None)
                host = buffer[used : used + numel].view(tensor.shape)
                if used == 0:
                    self._host_first_views[name] = host
            self._host_used[name] = used + numel
        host.copy_(tensor, non_blocking=True)
        self.stats.device_to_host_copies += 1
        return host

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
        elif self.device.type == "cuda" and tensor.device.type == "cuda":
            # On another GPU (e.g. a CUDA-shm region the client registered there): one peer copy, ordered
            # by torch with the current streams of both devices.
            self.stats.device_to_device_copies += 1
        return tensor.to(self.device).contiguous()

    def _pointer(self, tensor: torch.Tensor) -> int:
        return int(tensor.data_ptr()) if tensor.numel() else int(self._placeholder.data_ptr())

    def _bind(self, spec: TensorSpec, tensor: torch.Tensor, is_input: bool) -> None:
        """Bind by pointer; an output already bound at the same pointer and shape is left as it is."""
        pointer, shape = self._pointer(tensor), tuple(tensor.shape)
        if not is_input and self._bound_outputs.get(spec.name) == (pointer, shape):
            return
        bind = self._binding.bind_input if is_input else self._binding.bind_output
        bind(
            spec.name,
            self.placement.device_type,
            self.placement.device_id,
            spec.element_type.onnx_proto,
            list(shape),
            pointer,
        )
        if not is_input:
            self._bound_outputs[spec.name] = (pointer, shape)
        self.stats.binds += 1

    def _output_shape(self, name: str, bound: Mapping[str, torch.Tensor]) -> tuple[int, ...] | None:
        plan = self._output_plans[name]
        if plan is None:
            return None
        return tuple(
            dim if isinstance(dim, int) else int(bound[dim.input_name].shape[dim.axis])  # type: ignore[union-attr]
            for dim in plan
        )


class _CudaGraphs:
    """ORT CUDA graphs (opt-in `cuda_graph`): one graph per input-shape signature, captured by ORT on
    the first runs of that signature (run option gpu_graph_id, ORT >= 1.18) and replayed after. A replay
    reads and writes the addresses it was captured with, so inputs are copied into fixed buffers and
    outputs come from fixed buffers, one set per shape, never moved or freed."""

    MAX_GRAPHS = 32  # signatures past this run without a graph (gpu_graph_id -1)

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffers: dict[tuple[tuple[str, str], tuple[int, ...]], torch.Tensor] = {}
        self._ids: dict[tuple[tuple[str, tuple[int, ...]], ...], ort.RunOptions] = {}
        self._uncaptured = self._options(-1)

    @staticmethod
    def _options(graph_id: int) -> ort.RunOptions:
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return options

    def options_for(self, bound: Mapping[str, torch.Tensor]) -> tuple[ort.RunOptions, bool]:
        """The run options for these input shapes, and whether they run as a graph (False past
        MAX_GRAPHS shapes: such runs take the ordinary path and keep no fixed buffers)."""
        key = tuple(sorted((name, tuple(t.shape)) for name, t in bound.items()))
        options = self._ids.get(key)
        if options is None:
            if len(self._ids) >= self.MAX_GRAPHS:
                return self._uncaptured, False
            options = self._ids[key] = self._options(len(self._ids) + 1)  # ORT reserves 0
        return options, True

    def buffer(self, key: tuple[str, str], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        tensor = self._buffers.get((key, shape))
        if tensor is None:
            tensor = self._buffers[(key, shape)] = torch.empty(shape, dtype=dtype, device=self.device)
        return tensor

    def stage(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        fixed = self.buffer(("input", name), tuple(tensor.shape), tensor.dtype)
        fixed.copy_(tensor, non_blocking=True)
        return fixed


def _ortvalue_to_torch(value: Any, device: torch.device) -> torch.Tensor:
    """An ORT-allocated output as a torch tensor that keeps the OrtValue alive, without a host copy."""
    c_value = value._ortvalue if hasattr(value, "_ortvalue") else value
    if hasattr(c_value, "to_dlpack"):
        return torch.utils.dlpack.from_dlpack(c_value.to_dlpack())
    if value.device_name().lower() == "cpu":
        return torch.from_numpy(value.numpy())
    # The session's own device: a bare "cuda" would mean the current device, and a copy to it.
    return torch.as_tensor(_CudaArray(value), device=device)


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
