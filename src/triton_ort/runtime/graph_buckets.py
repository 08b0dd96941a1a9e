"""CUDA graphs (option cuda_graph): whether a runner captures them, and the buckets a padded graph serves.

A plan captured as a graph replays on fixed input buffers, into which each run copies its inputs. A
gathering server sees every sum of request sizes up to max_batch_size, and graph ids are few
(MAX_CUDA_GRAPHS), so for a model whose rows never mix across the batch axis (row_mixing.py) one graph
serves a bucket of batch sizes: the batch is padded up to the next power of two (at most max_batch_size),
and the answer is the first rows of the graph's outputs. The padding rows are whatever the graph's input
buffers hold past the run's rows: copies of the first run's last row (written once, at that run), or rows
of earlier runs; so each is an input the model has taken, whatever it checks, and no copy is spent on them
per run. Each row is computed as in any batch of the bucket's size, apart from the others; the padding
rows' answers are never handed out. Gathering's concatenation writes straight into those buffers (the
plan cache's `input_buffers`), so a gathered batch is copied once, not twice.

Padding needs three facts: graphs are on (graphs_on), the requests are gathered, and the graph is known not
to mix rows; `padded_rows` is that decision, in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import onnxruntime as ort

from ..model.signature import OnnxSignature
from .run_plan import RowViews, RunPlan, plan_output_shape
from .session import Placement, cuda_graphs_enabled
from .tensor_checks import Signature

if TYPE_CHECKING:
    import torch

LOGGER = logging.getLogger(__name__)

MAX_CUDA_GRAPHS = 32
"""CUDA graph ids a runner gives out; past it, new signatures run without a graph. A captured plan is never
evicted (its graph replays on the addresses of its buffers), and an id is never given twice: a plan
dropped after a failed run leaves its id captured in ORT on buffers that are gone."""


def graphs_on(
    requested: bool, placement: Placement, session: ort.InferenceSession, signature: OnnxSignature
) -> bool:
    """Whether runs capture CUDA graphs: asked for (option cuda_graph), on a CUDA session that has them
    enabled, and every output's shape follows from the inputs' (said once in the log otherwise)."""
    if not (requested and placement.is_cuda and cuda_graphs_enabled(session)):
        return False
    output_shapes = {spec.name: plan_output_shape(spec, signature.inputs) for spec in signature.outputs}
    if any(shape is None for shape in output_shapes.values()):
        # A graph replays into fixed output buffers; a data-dependent size has none to fix.
        LOGGER.warning(
            "CUDA graphs are off: outputs %s have data-dependent sizes, and a graph needs every "
            "output's shape to follow from the inputs' shapes",
            [name for name, shape in output_shapes.items() if shape is None],
        )
        return False
    return True


def padded_rows(
    graphs: bool,
    gathers: bool,
    max_batch_size: int,
    outputs_follow_batch: bool,
    rows_independent: Callable[[], bool],
) -> int:
    """The batch size up to which graphs serve buckets (0: each batch size gets a graph of its own): where
    graphs are on, Triton batches, requests are gathered, the graph is known not to mix rows, and every
    output follows the batch axis, so a padded row changes no other row's answer. The file is asked before
    the outputs are looked at, as the load always has (its log line says why batches are not padded)."""
    if not (graphs and gathers and max_batch_size > 1):
        return 0
    if not rows_independent():
        return 0
    return max_batch_size if outputs_follow_batch else 0


def graph_bucket(rows: int, max_rows: int) -> int:
    """The batch size a graph for `rows` rows is captured at: the next power of two, at most `max_rows`
    (Triton's max_batch_size), and never fewer than `rows`."""
    if rows <= 1:
        return rows
    return max(rows, min(1 << (rows - 1).bit_length(), max_rows))


def batch_bucket(
    tensors: Mapping[str, torch.Tensor], shared_inputs: frozenset[str], max_rows: int
) -> tuple[int, int] | None:
    """(rows, the bucket they are padded to) for a run a bucket's graph serves: batches are padded
    (max_rows > 0) and every batched input has the same rows, at least one."""
    if not max_rows:
        return None
    rows = None
    for name, tensor in tensors.items():
        if name in shared_inputs:
            continue
        if tensor.dim() == 0 or (rows is not None and tensor.shape[0] != rows):
            return None
        rows = int(tensor.shape[0])
    if not rows:
        return None
    return rows, graph_bucket(rows, max_rows)


def signature_at(tensors: Mapping[str, torch.Tensor], rows: int, shared_inputs: frozenset[str]) -> Signature:
    """The signature of these inputs with `rows` rows in each batched one."""
    return tuple(
        (
            name,
            tensor.dtype,
            tensor.shape if name in shared_inputs else _torch_size((rows, *tensor.shape[1:])),
        )
        for name, tensor in tensors.items()
    )


def copy_into_graph(
    plan: RunPlan,
    graph_inputs: dict[str, torch.Tensor],
    staged: Sequence[torch.Tensor],
    views: RowViews | None,
    rows: int | None,
    shared_inputs: frozenset[str],
) -> None:
    """A graph replays on the addresses it was captured with: the run's inputs are copied into its fixed
    buffers (a padded run's into its first rows; the padding rows once, at the plan's first run)."""
    for (name, fixed), tensor in zip(graph_inputs.items(), staged, strict=True):
        if tensor.data_ptr() == fixed.data_ptr():
            continue  # concatenated in place (input_buffers)
        if views is None or name in shared_inputs or rows == fixed.shape[0]:
            fixed.copy_(tensor, non_blocking=True)
            continue
        if not plan.padding_written:  # once: copies of the last row (the module's docstring)
            fixed[rows:].copy_(tensor[-1:].expand_as(fixed[rows:]), non_blocking=True)
        views.inputs[name].copy_(tensor, non_blocking=True)
    plan.padding_written = True


def _torch_size(shape: tuple[int, ...]) -> torch.Size:
    """A shape as torch spells it (graphs run on CUDA sessions, on torch): equal to a signature's Size."""
    import torch

    return torch.Size(shape)
