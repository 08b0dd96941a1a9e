"""Run an ORT session on torch tensors with IO binding: inputs and outputs stay where they are.

Everything that depends only on a request's input signature (names, dtypes, shapes) is worked out once, in
a `RunPlan`: the output shapes, where the outputs go (`OutputPlacement`), the output buffers and their
bindings, the pinned host buffers for outputs handed back on the host, and a CUDA graph id. A run then
reads the input pointers, binds them, runs, queues the host copies, and hands back the plan's buffers:
no allocation, no rebinding of outputs, no per-run decision.

Outputs whose shape follows from the inputs (static axes, or a symbolic axis that also names an input
axis, such as the batch) live in buffers the plan allocates, so ORT writes straight into memory torch
owns. Outputs with data-dependent shapes are allocated by ORT on the device at each run and wrapped as
torch tensors through DLPack, again without a host copy.

CUDA graphs (option cuda_graph): a plan captured as a graph replays on fixed input buffers, into which each
run copies its inputs. A gathering server sees every sum of request sizes up to max_batch_size, and graph
ids are few (MAX_CUDA_GRAPHS), so for a model whose rows never mix across the batch axis (row_mixing.py,
decided by ModelInstance through `pad_graph_batches`) one graph serves a bucket of batch sizes: the batch is
padded up to the next power of two (at most max_batch_size), and the answer is the first rows of the graph's
outputs. The padding rows are whatever the graph's input buffers hold past the run's rows: copies of the
first run's last row (written once, at that run), or rows of earlier runs; so each is an input the model has
taken, whatever it checks, and no copy is spent on them per run. Each row is computed as in any batch of the
bucket's size, apart from the others; the padding rows' answers are never handed out. Gathering concatenates
its requests straight into those buffers (`input_buffers`), so a gathered batch is copied once, not twice.

A plan's buffers are handed out as the answer, and reused by the plan's next run. That is safe across
executes: Triton's python backend has copied a response's outputs before it sends the instance its next
execute(), which ModelInstance declares with `begin_execute()`. Within one execute, a plan whose buffers
already hold an answer runs as a spare (a plan of the same signature with buffers of its own, not cached);
so does every run of a caller that never declares executes (each answer is then its own).

Handing a GPU tensor back through Triton's python backend has a fixed cost (measured ~0.45 ms for a
KB-size output on an H200, docs/benchmarks.md), which a small output does not repay; such outputs are
copied once into the plan's pinned host buffers, on the session's stream.

On a CUDA session with a caller's stream, ORT does not synchronise at the end of a run: the caller
synchronises that stream once (ModelInstance.infer does), after the host copies are queued.

Strings: ORT's IO binding and OrtValues refuse string data, so a model with a string input or output runs
through `session.run`, as Triton's native onnxruntime backend sends strings through the host. Its strings
travel as numpy arrays of bytes (Triton's BYTES, as `as_numpy()` gives them), given to ORT as str, which
ORT encodes into its own strings (the conversion its Python API requires); its numeric inputs go as OrtValues
over their torch memory (DLPack: no copy, on the host or the device), and its outputs come back on the host
(numeric ones as torch tensors, strings as numpy arrays of str). Such a model does not gather requests:
each runs alone (the answers of requests of different lengths stay each their own).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import torch.utils.dlpack

from .errors import InputError
from .options import DEFAULT_HOST_OUTPUT_MAX_BYTES
from .session import Placement, cuda_graphs_enabled, session_placement
from .signature import TensorSpec, one_value_per_request, read_specs
from .stats import RunnerStats
from .tensor_checks import Signature, check_against_specs, check_shared_axes, signature_of

LOGGER = logging.getLogger(__name__)


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


NO_GRAPH = -1
"""ORT's gpu_graph_id for a run that neither captures nor replays a CUDA graph."""


def _run_options(graph_id: int) -> ort.RunOptions:
    options = ort.RunOptions()
    # Always named, even where no graph is used: ORT >= 1.31 reads it at every run_with_iobinding, and a
    # missing key costs a C++ exception turned into a Python one (30 µs per run on the 2-core CPU machine,
    # ~100 µs per execute in the stub on the GPU test host; docs/benchmarks.md).
    options.add_run_config_entry("gpu_graph_id", str(graph_id))
    return options


def _reads_inputs_on_host(session: ort.InferenceSession) -> bool:
    """Whether ORT reads some input of a CUDA session on the host (a CPU node's input, such as a shape):
    it then copies that input at bind time. An ORT too old to say (get_input_memory_infos came after
    1.23) is taken to do so."""
    try:
        infos = session.get_input_memory_infos()
    except (AttributeError, RuntimeError):
        return True
    return infos is None or any(info.name != "Cuda" for info in infos)


PLAN_CACHE_SIZE = 32
"""Plans kept per runner, least recently used first out: a load of ever-new batch sizes (gathered requests
sum theirs) cannot grow memory without bound. A signature past it is planned again when it comes back."""


def graph_bucket(rows: int, max_rows: int) -> int:
    """The batch size a graph for `rows` rows is captured at: the next power of two, at most `max_rows`
    (Triton's max_batch_size), and never fewer than `rows`."""
    if rows <= 1:
        return rows
    return max(rows, min(1 << (rows - 1).bit_length(), max_rows))


MAX_CUDA_GRAPHS = 32
"""CUDA graph ids a runner gives out; past it, new signatures run without a graph. A captured plan is never
evicted (its graph replays on the addresses of its buffers), and an id is never given twice: a plan
dropped after a failed run leaves its id captured in ORT on buffers that are gone."""


@dataclass
class RunPlan:
    """One input signature's run, prepared: its binding, output buffers and run options."""

    binding: ort.IOBinding
    outputs: dict[str, torch.Tensor]
    """Bound once, written by every run: the outputs whose shapes the signature fixes."""
    ort_allocated: tuple[TensorSpec, ...]
    """Outputs of data-dependent shape, allocated by ORT at each run."""
    host: dict[str, torch.Tensor] | None
    """Pinned copies of every output, handed back instead of the device ones (host placement)."""
    run_options: ort.RunOptions | None
    graph_inputs: dict[str, torch.Tensor] | None = None
    """A CUDA graph's fixed input buffers (bound once): each run copies its inputs into them."""
    padding_written: bool = False
    """Every row of graph_inputs holds some run's input (the module's docstring, "CUDA graphs")."""
    answered: int = -1
    """The execute whose answer holds this plan's buffers."""
    _rows_views: dict[int, RowViews] = field(default_factory=dict, init=False, repr=False)

    def rows_of(self, rows: int, shared_inputs: frozenset[str]) -> RowViews:
        """The first `rows` rows of a padded plan's buffers (its batched inputs' and its outputs'), made once
        per row count: a view costs a few µs per tensor and execute in the stub, and a gathering server sees
        a few row counts again and again. At most ROW_VIEWS_KEPT counts per plan; past them, afresh."""
        views = self._rows_views.get(rows)
        if views is None:
            views = RowViews(
                inputs={
                    name: fixed[:rows]
                    for name, fixed in (self.graph_inputs or {}).items()
                    if name not in shared_inputs
                },
                outputs={name: tensor[:rows] for name, tensor in self.outputs.items()},
                host={name: tensor[:rows] for name, tensor in (self.host or {}).items()},
            )
            if len(self._rows_views) >= ROW_VIEWS_KEPT:
                self._rows_views.clear()
            self._rows_views[rows] = views
        return views


ROW_VIEWS_KEPT = 64
"""Row counts whose views a padded plan keeps (RunPlan.rows_of): views are small, but rows can take any
value up to the bucket's size."""


@dataclass(frozen=True)
class RowViews:
    """A padded run's rows of its plan's buffers: where its inputs go and where its answer is."""

    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    host: dict[str, torch.Tensor]


class IOBindingRunner:
    """Runs one session on torch tensors, through one RunPlan per input signature. Not thread-safe: one
    runner per model instance."""

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
        """The inputs every run needs."""
        self.overridable = read_specs(session.get_overridable_initializers(), "input")
        """The inputs a run may give (initializers that are also graph inputs: the file holds a default)."""
        self.shared_inputs = frozenset(s.name for s in self.overridable if one_value_per_request(s))
        """Overridable inputs without a batch axis: one value for all the rows of a run (gather.py)."""
        self.outputs = read_specs(session.get_outputs(), "output")
        self._output_shapes = {spec.name: _plan_output_shape(spec, self.inputs) for spec in self.outputs}
        # Requests can be concatenated along axis 0 only if every output's first axis is that same batch
        # axis; otherwise the joint output could not be split back (a size that merely equals the row
        # count would be split wrongly).
        self.has_strings = any(spec.element_type.is_string for spec in (*self.inputs, *self.outputs))
        self.outputs_follow_batch = not self.has_strings and all(
            plan and isinstance(plan[0], _AxisSource) and plan[0].axis == 0
            for plan in self._output_shapes.values()
        )
        self._valid_signatures: set[Signature] = set()
        self._plans: OrderedDict[Signature, RunPlan] = OrderedDict()
        self._graph_plans: dict[Signature, RunPlan] = {}
        self._graph_ids_given = 0
        self._graph_max_rows = 0  # > 0: graphs serve buckets of batch sizes up to it (pad_graph_batches)
        self._execute = 0  # counts begin_execute(); 0: the caller declares no executes
        self.stats = RunnerStats()
        # A failed run can leave ORT's CUDA arena holding what it grabbed for it (a request that asked for
        # more than the GPU has once left 140 GB reserved). The next run then shrinks the arena back.
        self.arena_needs_shrink = False
        self._run_options, self._shrink_options = self._make_run_options(arena_shrinkage)
        self._cuda_graph = cuda_graph and self.placement.is_cuda and cuda_graphs_enabled(session)
        if self._cuda_graph and any(shape is None for shape in self._output_shapes.values()):
            # A graph replays into fixed output buffers; a data-dependent size has none to fix.
            LOGGER.warning(
                "CUDA graphs are off: outputs %s have data-dependent sizes, and a graph needs every "
                "output's shape to follow from the inputs' shapes",
                [name for name, shape in self._output_shapes.items() if shape is None],
            )
            self._cuda_graph = False
        if self._cuda_graph:
            self._shrink_options = None  # a captured graph keeps its memory; nothing to shrink
        self.inputs_read_on_host = self.placement.is_cuda and _reads_inputs_on_host(session)
        # An empty tensor's data_ptr may be 0, which ORT rejects; bind this instead (never read: 0 elements).
        self._placeholder = torch.empty(8, dtype=torch.uint8, device=self.device)

    @property
    def graph_ids_given(self) -> int:
        """CUDA graphs this runner has had ORT capture (or is capturing), at most MAX_CUDA_GRAPHS."""
        return self._graph_ids_given

    @property
    def cuda_graph(self) -> bool:
        """Whether this runner captures CUDA graphs (option cuda_graph, on a CUDA session)."""
        return self._cuda_graph

    def pad_graph_batches(self, max_rows: int) -> bool:
        """Let each CUDA graph serve a bucket of batch sizes up to `max_rows` (the module's docstring), for
        a model whose rows never mix across axis 0: only its caller can know that. Whether it applies: it
        needs graphs, and outputs that all follow the batch axis."""
        if not (self._cuda_graph and self.outputs_follow_batch and max_rows > 1):
            return False
        self._graph_max_rows = max_rows
        return True

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
            options = _run_options(NO_GRAPH)
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
            return options, None
        options, shrink = self._cuda_run_options(), self._cuda_run_options()
        if arena_shrinkage:  # the config's memory.enable_memory_arena_shrinkage, on every run
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
        shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", f"gpu:{self.placement.device_id}")
        return options, shrink

    def _cuda_run_options(self, graph_id: int = NO_GRAPH) -> ort.RunOptions:
        options = _run_options(graph_id)
        if self.placement.cuda_stream is not None:
            # ORT's end-of-run stream sync would be the first of two: the caller syncs the same stream
            # after queueing the host copies, so one wait covers kernels and copies.
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return options

    def validate(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Raise InputError naming the input, what was expected and what came."""
        # Requests repeat a few signatures; each is checked in full once.
        signature = signature_of(tensors)
        if signature in self._valid_signatures:
            return
        check_against_specs(self.inputs, tensors, "input", optional=self.overridable)
        check_shared_axes(self.bound_specs(tensors), tensors)
        if len(self._valid_signatures) < 1024:
            self._valid_signatures.add(signature)

    def bound_specs(self, tensors: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
        """The inputs a run of these tensors binds: every required one, and the overridable ones given
        (ORT takes an initializer's default for those not bound)."""
        if not self.overridable:
            return self.inputs
        return self.inputs + tuple(spec for spec in self.overridable if spec.name in tensors)

    @property
    def plan_count(self) -> int:
        """Plans cached now (CUDA graphs included)."""
        return len(self._plans) + len(self._graph_plans)

    def begin_execute(self) -> None:
        """Declare that the outputs handed out so far have been consumed, so the plans' buffers may be
        written again. Triton's python backend copies a response's outputs before it sends the instance
        its next execute(), so ModelInstance calls this at the start of each one."""
        self._execute += 1

    def run(
        self, tensors: Mapping[str, torch.Tensor], validated: bool = False, fresh: bool = False
    ) -> dict[str, torch.Tensor]:
        """Validate (unless the caller just did), bind, run. Outputs are torch tensors on the session's
        device, or in pinned host memory when the placement says so; on a CUDA session with a caller's
        stream they are complete once that stream is synchronised. They stay valid until the next
        begin_execute(). `fresh`: the caller has just queued work on the stream that produces these
        inputs (a concatenation, a hook), so it is waited for before binding, as a staging copy is."""
        if not validated:
            self.validate(tensors)
        if self.has_strings:
            return self._run_with_strings(tensors)
        started = time.perf_counter()
        staged_before = self.stats.host_to_device_copies
        # Kept referenced until run() returns: ORT holds only their pointers.
        specs = self.bound_specs(tensors)
        staged = [self.to_device(tensors[spec.name]) for spec in specs]
        plan, rows = self._plan_for(tensors)
        binding = plan.binding
        views = plan.rows_of(rows, self.shared_inputs) if rows is not None else None
        if plan.graph_inputs is not None:  # a graph replays on the addresses it was captured with
            for (name, fixed), tensor in zip(plan.graph_inputs.items(), staged, strict=True):
                if tensor.data_ptr() == fixed.data_ptr():
                    continue  # concatenated in place (input_buffers)
                if views is None or name in self.shared_inputs or rows == fixed.shape[0]:
                    fixed.copy_(tensor, non_blocking=True)
                    continue
                if not plan.padding_written:  # once: copies of the last row (the module's docstring)
                    fixed[rows:].copy_(tensor[-1:].expand_as(fixed[rows:]), non_blocking=True)
                views.inputs[name].copy_(tensor, non_blocking=True)
            plan.padding_written = True
        if self.inputs_read_on_host and (fresh or self.stats.host_to_device_copies != staged_before):
            # ORT copies an input it needs on the CPU at bind time, with a blocking copy on the legacy
            # stream, which does not wait for the staging copy (or the caller's kernels) just queued on ours.
            # Inputs read on the device need no wait: ORT's kernels run on our stream, after that work.
            torch.cuda.current_stream(self.device).synchronize()
        if plan.graph_inputs is None:
            # Bound every run, even at an unchanged address: ORT keeps its own copy of an input it needs
            # on another device, taken at bind time, so a skipped bind would reuse old values.
            for spec, tensor in zip(specs, staged, strict=True):
                self._bind(binding.bind_input, spec, tensor)
        for spec in plan.ort_allocated:
            binding.bind_output(spec.name, self.placement.device_type, self.placement.device_id)
        ran = time.perf_counter()
        self.stats.bind_seconds += ran - started
        shrink = self.arena_needs_shrink and self._shrink_options is not None
        try:
            self.session.run_with_iobinding(binding, self._shrink_options if shrink else plan.run_options)
        except Exception:
            self.arena_needs_shrink = self._shrink_options is not None
            self._forget(plan)  # do not trust what a failed run left bound
            raise
        self.stats.arena_shrinks += int(shrink)
        self.arena_needs_shrink = False
        plan.answered = self._execute
        finished = time.perf_counter()
        self.stats.ort_run_seconds += finished - ran
        self.stats.ort_runs += 1
        # A dict of the caller's own (a hook may change it); a padded run's answer is the first rows.
        outputs = dict(views.outputs if views is not None else plan.outputs)
        if plan.ort_allocated:
            produced = dict(zip((spec.name for spec in self.outputs), binding.get_outputs(), strict=True))
            outputs = {
                spec.name: outputs[spec.name]
                if spec.name in outputs
                else _ortvalue_to_torch(produced[spec.name], self.device)
                for spec in self.outputs
            }
        if plan.host is None:
            return outputs
        answer = {}
        for name, tensor in outputs.items():
            host = (views.host if views is not None else plan.host).get(name)
            if host is None:  # data-dependent size: pinned memory of this run's own
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            answer[name] = host
        self.stats.device_to_host_copies += len(answer)
        self.stats.host_output_runs += 1
        self.stats.device_to_host_seconds += time.perf_counter() - finished
        return answer

    def _run_with_strings(self, tensors: Mapping[str, Any]) -> dict[str, Any]:
        """session.run for a model with strings (the module's docstring, "Strings")."""
        started = time.perf_counter()
        feeds = {
            spec.name: _string_feed(spec.name, tensors[spec.name])
            if spec.element_type.is_string
            else self._numeric_feed(self.to_device(tensors[spec.name]))
            for spec in self.bound_specs(tensors)
        }
        ran = time.perf_counter()
        self.stats.bind_seconds += ran - started
        results = self.session.run(None, feeds)  # ORT synchronises: its outputs are complete host arrays
        self.stats.ort_run_seconds += time.perf_counter() - ran
        self.stats.ort_runs += 1
        return {
            spec.name: value if spec.element_type.is_string else torch.from_numpy(value)
            for spec, value in zip(self.outputs, results, strict=True)
        }

    def _numeric_feed(self, tensor: torch.Tensor) -> Any:
        """A numeric input beside strings: an OrtValue over its memory (ORT >= 1.22 takes DLPack); on
        older ORT, a numpy view on the host, or one copy to the host from the device."""
        if hasattr(ort.OrtValue, "from_dlpack"):
            return ort.OrtValue.from_dlpack(tensor)
        if tensor.device.type == "cpu":
            return tensor.numpy()
        self.stats.device_to_host_copies += 1
        return tensor.cpu().numpy()

    def input_buffers(self, tensors: Mapping[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
        """Where the next run of `rows` rows of inputs like these (their dtypes, and their shapes past the
        batch axis) reads its batched inputs, for a caller that can write them there itself: the first rows
        of the fixed buffers of the bucket graph that run will replay. Empty when that run has no such graph
        yet, or its buffers hold an answer of this execute (it would run as a spare). gather.py concatenates
        its requests into them."""
        if not (self._execute and self._graph_max_rows and rows > 0):
            return {}
        plan = self._graph_plans.get(self._signature_at(tensors, graph_bucket(rows, self._graph_max_rows)))
        if plan is None or plan.graph_inputs is None or not plan.padding_written:
            return {}
        if plan.answered == self._execute:
            return {}
        return dict(plan.rows_of(rows, self.shared_inputs).inputs)

    def _plan_for(self, tensors: Mapping[str, torch.Tensor]) -> tuple[RunPlan, int | None]:
        """The signature's cached plan, made on its first run, and the rows to pad it from (None: no
        padding); a spare plan when the cached one's buffers still hold an answer (given in this execute,
        or to a caller that declares no executes). Where batches are padded (pad_graph_batches), a graph
        is cached by its bucket's signature."""
        if self._execute == 0:
            return self._new_plan(tensors, graph=False), None
        padding = self._batch_bucket(tensors)
        if padding is not None:
            rows, bucket = padding
            signature = self._signature_at(tensors, bucket)
            plan = self._graph_plans.get(signature)
            if plan is None and self._graph_ids_given < MAX_CUDA_GRAPHS:
                shapes = {  # a new plan reads only shapes and dtypes
                    name: torch.empty(size, dtype=dtype, device="meta") for name, dtype, size in signature
                }
                plan = self._graph_plans[signature] = self._new_plan(shapes, graph=True)
            if plan is not None:
                if plan.answered == self._execute:
                    return self._new_plan(tensors, graph=False), None
                return plan, rows
            # past the graph ids: an ordinary plan at the run's own shapes, below
        signature = signature_of(tensors)
        plan = self._graph_plans.get(signature) or self._plans.get(signature)
        if plan is None:
            graph = padding is None and self._cuda_graph and self._graph_ids_given < MAX_CUDA_GRAPHS
            plan = self._new_plan(tensors, graph)
            if graph:
                self._graph_plans[signature] = plan
            else:
                self._plans[signature] = plan
                if len(self._plans) > PLAN_CACHE_SIZE:
                    self._plans.popitem(last=False)
        elif signature in self._plans:
            self._plans.move_to_end(signature)
        if plan.answered == self._execute:
            return self._new_plan(tensors, graph=False), None
        return plan, None

    def _batch_bucket(self, tensors: Mapping[str, torch.Tensor]) -> tuple[int, int] | None:
        """(rows, the bucket they are padded to) for a run a bucket's graph serves: batches are padded
        (pad_graph_batches) and every batched input has the same rows, at least one."""
        if not self._graph_max_rows:
            return None
        rows = None
        for name, tensor in tensors.items():
            if name in self.shared_inputs:
                continue
            if tensor.dim() == 0 or (rows is not None and tensor.shape[0] != rows):
                return None
            rows = int(tensor.shape[0])
        if not rows:
            return None
        return rows, graph_bucket(rows, self._graph_max_rows)

    def _signature_at(self, tensors: Mapping[str, torch.Tensor], rows: int) -> Signature:
        """The signature of these inputs with `rows` rows in each batched one."""
        return tuple(
            (
                name,
                tensor.dtype,
                tensor.shape if name in self.shared_inputs else torch.Size((rows, *tensor.shape[1:])),
            )
            for name, tensor in tensors.items()
        )

    def _forget(self, plan: RunPlan) -> None:
        for plans in (self._plans, self._graph_plans):
            for signature, cached in list(plans.items()):
                if cached is plan:
                    del plans[signature]

    def _new_plan(self, tensors: Mapping[str, torch.Tensor], graph: bool) -> RunPlan:
        binding = self.session.io_binding()
        shapes = {spec.name: self._output_shape(spec.name, tensors) for spec in self.outputs}
        to_host = self._outputs_to_host(shapes)
        outputs: dict[str, torch.Tensor] = {}
        for spec in self.outputs:
            shape = shapes[spec.name]
            if shape is not None:
                outputs[spec.name] = torch.empty(
                    shape, dtype=spec.element_type.tensor_dtype, device=self.device
                )
                self._bind(binding.bind_output, spec, outputs[spec.name])
        host: dict[str, torch.Tensor] | None = None
        if to_host:
            host = {
                name: torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                for name, tensor in outputs.items()
            }
        graph_inputs = None
        run_options = self._run_options
        if graph:
            # C-ordered whatever the request's strides (empty_like would keep them): bound by pointer
            specs = self.bound_specs(tensors)
            graph_inputs = {
                spec.name: torch.empty(
                    tensors[spec.name].shape, dtype=tensors[spec.name].dtype, device=self.device
                )
                for spec in specs
            }
            for spec, fixed in zip(specs, graph_inputs.values(), strict=True):
                self._bind(binding.bind_input, spec, fixed)
            self._graph_ids_given += 1
            run_options = self._cuda_run_options(graph_id=self._graph_ids_given)  # ORT reserves 0
        ort_allocated = tuple(spec for spec in self.outputs if spec.name not in outputs)
        return RunPlan(binding, outputs, ort_allocated, host, run_options, graph_inputs)

    def _outputs_to_host(self, shapes: Mapping[str, tuple[int, ...] | None]) -> bool:
        if not self.placement.is_cuda or self.output_placement.mode == "device":
            return False
        if self.output_placement.mode == "host":
            return True
        if any(shape is None for shape in shapes.values()):
            return False  # data-dependent sizes: unknown before the run, so keep them on the device
        total = sum(
            math.prod(shapes[spec.name] or ()) * spec.element_type.tensor_dtype.itemsize
            for spec in self.outputs
        )
        return total <= self.output_placement.host_max_bytes

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

    def _bind(self, bind: Any, spec: TensorSpec, tensor: torch.Tensor) -> None:
        """Bind by pointer (an input, or an output buffer of a plan)."""
        pointer = int(tensor.data_ptr()) if tensor.numel() else int(self._placeholder.data_ptr())
        bind(
            spec.name,
            self.placement.device_type,
            self.placement.device_id,
            spec.element_type.onnx_proto,
            list(tensor.shape),
            pointer,
        )
        self.stats.binds += 1

    def _output_shape(self, name: str, tensors: Mapping[str, torch.Tensor]) -> tuple[int, ...] | None:
        plan = self._output_shapes[name]
        if plan is None:
            return None
        return tuple(
            dim if isinstance(dim, int) else int(tensors[dim.input_name].shape[dim.axis])  # type: ignore[union-attr]
            for dim in plan
        )


def _string_feed(name: str, strings: Any) -> Any:
    """Triton's BYTES (a numpy object array of bytes) as ORT's Python API takes strings: str, which it
    encodes into its own strings (the one copy it needs). Bytes objects would reach ORT as their repr, and a
    fixed-width bytes array ('S') as C strings that run into the next one when a string fills its width."""
    if strings.dtype != object:
        return strings
    try:
        return np.array([s.decode() if isinstance(s, bytes) else s for s in strings.flat], object).reshape(
            strings.shape
        )
    except UnicodeDecodeError as error:
        raise InputError(
            f"input {name!r}: BYTES must be UTF-8 text for ONNX Runtime's string tensors ({error})"
        ) from error


def _ortvalue_to_torch(value: Any, device: torch.device) -> torch.Tensor:
    """An ORT-allocated output as a torch tensor that keeps the OrtValue alive, without a host copy."""
    c_value = value._ortvalue if hasattr(value, "_ortvalue") else value
    if hasattr(c_value, "to_dlpack"):
        tensor = torch.utils.dlpack.from_dlpack(c_value.to_dlpack())
        if tensor.numel() == 0:
            # ORT's DLPack gives an empty tensor strides of 0 (NonZero finding nothing: [2, 0], (0, 0)),
            # which pb_utils.Tensor.from_dlpack refuses as not C-contiguous (pb_tensor.cc checks every axis
            # that is not 1, empty ones too), and torch's .contiguous() keeps them. An empty tensor of
            # torch's own has C strides, and there is no data to copy.
            return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        return tensor
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
