"""Run an ORT session with IO binding: inputs and outputs stay where they are.

The runner binds torch tensors (a GPU instance, or hooks) or numpy arrays (a CPU instance: no torch in its
stub), through its `Arrays` (arrays.py); nothing below depends on which.

Everything that depends only on a request's input signature (names, dtypes, shapes) is worked out once, in
a `RunPlan` (run_plan.py, made here, cached and lent by run_plan_cache.py): the output buffers and their
bindings, where the outputs go (output_placement.py), pinned host buffers for outputs handed back on the
host, and a CUDA graph id (graph_buckets.py). A run reads top to bottom: stage the inputs on the device ORT
computes on, take the signature's plan, bind, run, and place the outputs: no allocation, no rebinding of
outputs, no per-run decision. Outputs of data-dependent shape (and one that a run finds ORT computing at
another size than its shared axis name gave: a decoder's present.* beside a longer attention mask) are
ORT's own allocation, wrapped without a copy.

What gathering (gather.py) calls is `check` (one request's tensors against the session's inputs) and
`run_batch` (one run of checked requests: one as sent, or several concatenated here, into a CUDA graph's
input buffers where the run replays one). A runner is not thread-safe, and holds no state beyond its own:
a scheduler with several threads gives each its own runner (and CUDA stream) over the one session.

On a CUDA session with a caller's stream, ORT does not synchronise at the end of a run: the caller
synchronises that stream once (lane.Lane.wait does), after the host copies are queued.

A model with strings runs through session.run instead (string_runner.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import onnxruntime as ort

from ..model.dtypes import from_onnx_type
from ..model.signature import Tensors, TensorSpec, one_value_per_request
from .arrays import Arrays, NumpyArrays, TorchArrays, concatenate
from .graph_buckets import copy_into_graph, graphs_on
from .output_placement import OutputPlacement, copy_to_host
from .run_plan import (
    BoundedSet,
    RunPlan,
    arena_run_options,
    cuda_run_options,
    output_shape,
    outputs_follow_batch,
    plan_output_shape,
)
from .run_plan_cache import RunPlanCache
from .session import Placement, reads_inputs_on_host, session_placement, session_signature
from .stats import RunnerStats
from .string_runner import run_with_strings
from .tensor_checks import Signature, check_against_specs, check_shared_axes, signature_of

LOGGER = logging.getLogger(__name__)


class IOBindingRunner:
    """Runs one session on its arrays, through one RunPlan per input signature. Not thread-safe: one
    runner per thread that runs (a model instance has one)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        placement: Placement,
        pinned_staging: bool = True,
        output_placement: OutputPlacement | None = None,
        cuda_graph: bool = False,
        arena_shrinkage: str = "",
        on_numpy: bool = False,
        graph_rows: int = 0,
        shared_inputs: frozenset[str] | None = None,
        follows_batch: bool | None = None,
    ) -> None:
        """`cuda_graph`: where the session can (graph_buckets.graphs_on); `graph_rows`: pad_graph_batches;
        `shared_inputs`, `follows_batch`: the model plan's (Lane.build), else read from the session."""
        self.session = session
        self.placement = session_placement(session, placement)
        self.output_placement = output_placement or OutputPlacement()
        self.stats = RunnerStats()
        if on_numpy and self.placement.is_cuda:
            raise ValueError("numpy arrays live on the host: a CUDA session runs on torch (arrays.py)")
        self.arrays: Arrays = (
            NumpyArrays(self.stats) if on_numpy else TorchArrays(self.placement, self.stats, pinned_staging)
        )
        self.device = self.arrays.device
        self.signature = signature = session_signature(session)
        """The session's tensors: what the model plan is built from (model_plan.py)."""
        self.inputs = signature.inputs  # every run needs them
        self.overridable = signature.overridable
        """The inputs a run may give (initializers that are also graph inputs: the file holds a default)."""
        self.outputs = signature.outputs
        if shared_inputs is None:
            shared_inputs = frozenset(s.name for s in self.overridable if one_value_per_request(s))
        self.shared_inputs = shared_inputs
        """Overridable inputs without a batch axis: one value for all the rows of a run (gather.py)."""
        if follows_batch is None:
            follows_batch = outputs_follow_batch(self.inputs, self.outputs)
        self.outputs_follow_batch = follows_batch
        self._output_shapes = {spec.name: plan_output_shape(spec, self.inputs) for spec in self.outputs}
        self.has_strings = any(spec.element_type.is_string for spec in (*self.inputs, *self.outputs))
        self._checked_signatures: BoundedSet[Signature] = BoundedSet()
        # A failed run can leave ORT's CUDA arena holding what it grabbed for it (a request that asked for
        # more than the GPU has once left 140 GB reserved). The next run then shrinks the arena back.
        self.arena_needs_shrink = False
        self._run_options, self._shrink_options = arena_run_options(self.placement, arena_shrinkage)
        graphs = graphs_on(cuda_graph, self.placement, session, signature)
        if graphs:
            self._shrink_options = None  # a captured graph keeps its memory; nothing to shrink
        self.plans = RunPlanCache(self._new_plan, self._output_shapes, self.shared_inputs, graphs)
        self.inputs_read_on_host = self.placement.is_cuda and reads_inputs_on_host(session)
        # An empty tensor's data_ptr may be 0, which ORT rejects; bind this instead (never read: 0 elements).
        self._placeholder = self.arrays.empty((8,), from_onnx_type("tensor(uint8)", "placeholder"))
        if graph_rows:
            self.pad_graph_batches(graph_rows)

    def pad_graph_batches(self, max_rows: int) -> bool:
        """Let each CUDA graph serve a bucket of batch sizes up to `max_rows` (graph_buckets.py), for a
        model whose rows never mix across axis 0: only its caller can know that. Whether it applies."""
        return self.plans.pad_graph_batches(max_rows, self.outputs_follow_batch)

    def check(self, tensors: Tensors) -> None:
        """Raise InputError naming the input, what was expected and what came."""
        # Requests repeat a few signatures; each is checked in full once.
        signature = signature_of(tensors)
        if signature in self._checked_signatures:
            return
        check_against_specs(self.inputs, tensors, "input", optional=self.overridable)
        check_shared_axes(self.bound_specs(tensors), tensors)
        self._checked_signatures.keep(signature)

    def bound_specs(self, tensors: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
        """The inputs a run of these tensors binds: every required one, and the overridable ones given
        (ORT takes an initializer's default for those not bound)."""
        if not self.overridable:
            return self.inputs
        return self.inputs + tuple(spec for spec in self.overridable if spec.name in tensors)

    def reclaim_outputs(self) -> None:
        """Declare that the outputs lent out so far have been consumed, so the plans' buffers may be written
        again: a new lending round (run_plan.py). Triton's python backend copies a response's outputs
        before it sends the instance its next execute(), so lane.Lane.queue calls this at the start of
        each one. A caller that never calls it gets every answer in buffers of its own."""
        self.plans.reclaim()

    def run(self, tensors: Tensors) -> dict[str, Any]:
        """Check and run one set of tensors (run_checked)."""
        self.check(tensors)
        return self.run_checked(tensors, queued=False)

    def run_batch(self, requests: Sequence[Tensors]) -> dict[str, Any]:
        """One run of checked requests: one request's tensors as sent, or several requests concatenated
        along axis 0 (into the buffers of the CUDA graph the run replays, where it has them); gathering
        splits the answer back."""
        if len(requests) == 1:
            return self.run_checked(requests[0], queued=False)
        batched = [name for name in requests[0] if name not in self.shared_inputs]
        rows = sum([tensors[batched[0]].shape[0] for tensors in requests])
        into = self.plans.input_buffers(requests[0], rows)
        return self.run_checked(concatenate(self.arrays, requests, self.shared_inputs, into), queued=True)

    def run_checked(self, tensors: Tensors, queued: bool) -> dict[str, Any]:
        """Run checked tensors. Outputs are the runner's arrays on the device ORT computes on, or in pinned
        host memory where the output placement says so; on a CUDA session with a caller's stream they are
        complete once that stream is synchronised. They stay valid until the next reclaim_outputs().
        `queued`: the caller has just queued the work on the stream that produces these inputs (a
        concatenation, a hook), so it is waited for before binding, as a staging copy is."""
        if self.has_strings:
            return run_with_strings(
                self.session, self.bound_specs(tensors), self.outputs, tensors, self.arrays
            )
        started = time.perf_counter()
        # Stage: every bound input on the device ORT computes on, kept referenced until this returns (ORT
        # holds only their pointers).
        specs = self.bound_specs(tensors)
        staged = [self.to_device(tensors[spec.name]) for spec in specs]
        # Plan: the signature's (or its bucket's) cached plan.
        plan, rows = self.plans.plan_for(tensors)
        binding = plan.binding
        views = plan.rows_of(rows, self.shared_inputs) if rows is not None else None
        if plan.graph_inputs is not None:
            copy_into_graph(plan, plan.graph_inputs, staged, views, rows, self.shared_inputs)
        if self.inputs_read_on_host and (
            queued or any(new is not tensors[spec.name] for spec, new in zip(specs, staged, strict=True))
        ):
            # ORT copies an input it needs on the CPU at bind time, with a blocking copy on the legacy
            # stream, which does not wait for the staging copies (a staged input is a new tensor) or the
            # caller's kernels just queued on ours.
            # Inputs read on the device need no wait: ORT's kernels run on our stream, after that work.
            import torch

            torch.cuda.current_stream(self.device).synchronize()
        # Bind.
        if plan.graph_inputs is None:
            # Bound every run, even at an unchanged address: ORT keeps its own copy of an input it needs
            # on another device, taken at bind time, so a skipped bind would reuse old values.
            for spec, tensor in zip(specs, staged, strict=True):
                self._bind(binding.bind_input, spec, tensor)
        for spec in plan.ort_allocated:
            binding.bind_output(spec.name, self.placement.device_type, self.placement.device_id)
        ran = time.perf_counter()
        self.stats.bind_seconds += ran - started
        # Run.
        shrink = self.arena_needs_shrink and self._shrink_options is not None
        try:
            self.session.run_with_iobinding(binding, self._shrink_options if shrink else plan.run_options)
        except Exception as error:
            self.arena_needs_shrink = self._shrink_options is not None
            if self.plans.failed(tensors, plan, error):
                return self.run_checked(tensors, queued)  # again, with those outputs ORT's
            raise
        self.stats.arena_shrinks += int(shrink)
        self.arena_needs_shrink = False
        self.plans.lend(plan)
        finished = time.perf_counter()
        self.stats.ort_run_seconds += finished - ran
        self.stats.ort_runs += 1
        # Place the outputs: a dict of the caller's own (a hook may change it); a padded run's answer is the
        # first rows; ORT's own buffers for data-dependent sizes; host copies where the plan says so.
        outputs = dict(views.outputs if views is not None else plan.outputs)
        if plan.ort_allocated:
            produced = dict(zip((spec.name for spec in self.outputs), binding.get_outputs(), strict=True))
            outputs = {
                spec.name: outputs[spec.name]
                if spec.name in outputs
                else self.arrays.from_ort(produced[spec.name])
                for spec in self.outputs
            }
        if plan.host is None:
            return outputs
        answer = copy_to_host(outputs, views.host if views is not None else plan.host, self.stats)
        self.stats.device_to_host_seconds += time.perf_counter() - finished
        return answer

    def _new_plan(self, tensors: Tensors, graph_id: int | None, ort_sized: frozenset[str]) -> RunPlan:
        """The plan of tensors like these (RunPlanCache.plan_for decides when): output buffers bound once,
        pinned host copies where the placement says so, and a CUDA graph's fixed input buffers."""
        binding = self.session.io_binding()
        shapes = {
            spec.name: None
            if spec.name in ort_sized
            else output_shape(self._output_shapes[spec.name], tensors)
            for spec in self.outputs
        }
        to_host = self.placement.is_cuda and self.output_placement.plan_to_host(self.outputs, shapes)
        outputs: dict[str, Any] = {}
        for spec in self.outputs:  # bound in the session's order: get_outputs() gives them in bind order
            shape = shapes[spec.name]
            if shape is not None:
                outputs[spec.name] = self.arrays.empty(shape, spec.element_type)
                self._bind(binding.bind_output, spec, outputs[spec.name])
            else:  # ORT's allocation, bound again at each run (the same place in the binding)
                binding.bind_output(spec.name, self.placement.device_type, self.placement.device_id)
        host: dict[str, Any] | None = None
        if to_host:  # a CUDA session's: torch
            import torch

            host = {
                name: torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                for name, tensor in outputs.items()
            }
        graph_inputs = None
        options = self._run_options
        if graph_id is not None:
            # C-ordered whatever the request's strides (empty_like would keep them): bound by pointer
            import torch

            specs = self.bound_specs(tensors)
            graph_inputs = {
                spec.name: torch.empty(
                    tensors[spec.name].shape, dtype=tensors[spec.name].dtype, device=self.device
                )
                for spec in specs
            }
            for spec, fixed in zip(specs, graph_inputs.values(), strict=True):
                self._bind(binding.bind_input, spec, fixed)
            options = cuda_run_options(self.placement, graph_id=graph_id)
        ort_allocated = tuple(spec for spec in self.outputs if spec.name not in outputs)
        return RunPlan(binding, outputs, ort_allocated, host, options, graph_inputs)

    def to_device(self, tensor: Any) -> Any:
        """The tensor on the device ORT computes on (arrays.py: one copy at most, counted)."""
        return self.arrays.to_device(tensor)

    def _bind(self, bind: Any, spec: TensorSpec, tensor: Any) -> None:
        """Bind by pointer (an input, or an output buffer of a plan)."""
        pointer = self.arrays.pointer(tensor if math.prod(tensor.shape) else self._placeholder)
        bind(
            spec.name,
            self.placement.device_type,
            self.placement.device_id,
            spec.element_type.onnx_proto,
            list(tensor.shape),
            pointer,
        )
        self.stats.binds += 1
