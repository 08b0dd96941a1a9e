"""Run plans: what a run of one input signature (names, dtypes, shapes) needs, worked out once.

A `RunPlan` holds the binding, the output buffers bound once, the outputs ORT allocates itself (data-
dependent shapes), the pinned host buffers where outputs go to the host, the run options (a CUDA graph's
id among them) and, for a graph, its fixed input buffers. runner.py caches plans by signature and reads
them; graph_buckets.py pads a bucket's plan.

A plan's buffers are lent out as an answer and written again by the plan's next run. That is safe across
executes: Triton's python backend has copied a response's outputs before it sends the instance its next
execute(), which the caller declares with the runner's `reclaim_outputs()`. Each reclaim opens a new
lending round; a plan remembers the round its buffers were last lent in (`lent_in`), and within that round
a second run of its signature takes a spare plan (buffers of its own, not cached).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import onnxruntime as ort

from ..model.signature import TensorSpec
from .session import Placement

if TYPE_CHECKING:
    import torch

PLAN_CACHE_SIZE = 32
"""Plans kept per runner, least recently used first out: a load of ever-new batch sizes (gathered requests
sum theirs) cannot grow memory without bound. A signature past it is planned again when it comes back."""

SIGNATURES_KEPT = 1024
"""Signatures a check remembers as passed (BoundedSet): requests repeat a few, each is checked in full once,
and a load of ever-new shapes cannot grow memory without bound."""

NOT_LENT = -1
"""A plan's `lent_in` before its first answer."""

_T = TypeVar("_T", bound=Hashable)


class BoundedSet(set[_T]):
    """A set that stops growing at SIGNATURES_KEPT: membership is the set's own (no Python call per
    lookup); `keep` adds while there is room."""

    def keep(self, item: _T) -> None:
        if len(self) < SIGNATURES_KEPT:
            self.add(item)


@dataclass(frozen=True)
class AxisSource:
    """An output axis whose size is taken from an input axis (they share a symbolic name)."""

    input_name: str
    axis: int


OutputDim = int | AxisSource | None


def plan_output_shape(spec: TensorSpec, inputs: Sequence[TensorSpec]) -> tuple[OutputDim, ...] | None:
    """How to compute each axis of an output from the inputs; None when some axis is data-dependent."""
    symbols: dict[str, AxisSource] = {}
    for input_spec in inputs:
        for axis, dim in enumerate(input_spec.shape):
            if isinstance(dim, str):
                symbols.setdefault(dim, AxisSource(input_spec.name, axis))
    plan: list[OutputDim] = []
    for dim in spec.shape:
        if isinstance(dim, int):
            plan.append(dim)
        elif isinstance(dim, str) and dim in symbols:
            plan.append(symbols[dim])
        else:
            return None
    return tuple(plan)


def output_shape(
    plan: tuple[OutputDim, ...] | None, tensors: Mapping[str, torch.Tensor]
) -> tuple[int, ...] | None:
    """An output's shape for these inputs, by its plan_output_shape; None: data-dependent."""
    if plan is None:
        return None
    return tuple(
        dim if isinstance(dim, int) else int(tensors[dim.input_name].shape[dim.axis])  # type: ignore[union-attr]
        for dim in plan
    )


def follows_batch(plan: tuple[OutputDim, ...] | None) -> bool:
    """Whether an output's first axis is the inputs' batch axis (axis 0), so a joint output splits back."""
    return bool(plan) and isinstance(plan[0], AxisSource) and plan[0].axis == 0  # type: ignore[index]


def outputs_follow_batch(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> bool:
    """Whether requests can be concatenated along axis 0: every output's first axis is that same batch
    axis, or the joint output could not be split back (a size that merely equals the row count would be
    split wrongly); never for a model with strings (string_runner.py)."""
    if any(spec.element_type.is_string for spec in (*inputs, *outputs)):
        return False
    return all(follows_batch(plan_output_shape(spec, inputs)) for spec in outputs)


NO_GRAPH = -1
"""ORT's gpu_graph_id for a run that neither captures nor replays a CUDA graph."""


def run_options(graph_id: int) -> ort.RunOptions:
    options = ort.RunOptions()
    # Always named, even where no graph is used: ORT >= 1.31 reads it at every run_with_iobinding, and a
    # missing key costs a C++ exception turned into a Python one (30 µs per run on the 2-core CPU machine,
    # ~100 µs per execute in the stub on the GPU test host; docs/benchmarks.md).
    options.add_run_config_entry("gpu_graph_id", str(graph_id))
    return options


def _own_arenas(placement: Placement, arena_shrinkage: str) -> str:
    """The configured shrinkage on this instance's arenas: a `gpu:N` entry means this instance's GPU (one
    config serves instances on several GPUs, and ORT fails a run that names an arena the session lacks),
    and none on a CPU instance."""
    entries = []
    for entry in filter(None, arena_shrinkage.split(";")):
        if not entry.startswith("gpu:"):
            entries.append(entry)
        elif placement.is_cuda:
            entries.append(f"gpu:{placement.device_id}")
    return ";".join(dict.fromkeys(entries))


def arena_run_options(
    placement: Placement, arena_shrinkage: str
) -> tuple[ort.RunOptions | None, ort.RunOptions | None]:
    """The run options of a run without a graph, and those of a run that shrinks the CUDA arena after a
    failed one (None: no such run on a CPU session)."""
    arena_shrinkage = _own_arenas(placement, arena_shrinkage)
    if not placement.is_cuda:
        if not arena_shrinkage:
            return None, None
        options = run_options(NO_GRAPH)
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
        return options, None
    options, shrink = cuda_run_options(placement), cuda_run_options(placement)
    if arena_shrinkage:  # the config's memory.enable_memory_arena_shrinkage, on every run
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arena_shrinkage)
    shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", f"gpu:{placement.device_id}")
    return options, shrink


def cuda_run_options(placement: Placement, graph_id: int = NO_GRAPH) -> ort.RunOptions:
    options = run_options(graph_id)
    if placement.cuda_stream is not None:
        # ORT's end-of-run stream sync would be the first of two: the caller syncs the same stream after
        # queueing the host copies, so one wait covers kernels and copies.
        options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    return options


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
    """Every row of graph_inputs holds some run's input (graph_buckets.py)."""
    lent_in: int = NOT_LENT
    """The lending round (the runner's reclaim_outputs count) whose answer holds this plan's buffers."""
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
