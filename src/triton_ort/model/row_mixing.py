"""Graphs whose answer for one row depends on the other rows of the same run.

Gathering concatenates the requests of one execute() along the batch axis into one ORT run. That gives each
request the answer it would get alone only when the graph computes every row on its own. A graph that
computes over the batch axis does not: a model quantized with onnxruntime.quantization.quantize_dynamic
computes one quantization scale over the whole input (DynamicQuantizeLinear reduces over every element), so
a request's answer would change with the requests beside it (measured: 6 of 20 concurrent requests differed
from the same request alone by up to 1.5e-2). The model plan (runtime/model_plan.py) runs the requests of
such a graph one per ORT run unless the `gather_requests` parameter says otherwise.

The rule, kept simple and on the safe side (docs/configuration.md, `gather_requests`):
- Op types that always compute over the whole tensor mix rows: DynamicQuantizeLinear, ORT's fused
  com.microsoft DynamicQuantizeMatMul and DynamicQuantizeLSTM, and BatchNormalization in training mode
  (statistics over the batch).
- Ops that reduce, normalise or contract along axes (Reduce*, ArgMax, ArgMin, TopK, Softmax, LogSoftmax,
  Hardmax, CumSum, LpNormalization, LayerNormalization, MeanVarianceNormalization, MatMul, MatMulInteger,
  Gemm) mix rows when those axes include axis 0 of a tensor whose axis 0 may be the batch: named like the
  graph inputs' first axis, or of a size the graph does not state (after ONNX shape inference). A fixed size
  or another name is not the batch. A reduction with no axes reduces every axis, axis 0 included; axes
  computed at run time cannot be read at load and count as axis 0.
- A negative axis of a tensor whose rank shape inference could not find counts as a feature axis: ranks
  are lost after ops of other domains (ORT's fused com.microsoft ops), and the last axis is what such
  models normalise; taking it as the batch would run ordinary transformers one request at a time.
- Not found: graphs that move the batch axis elsewhere (Transpose, Reshape) and reduce over it there, and
  ops outside the lists above. `gather_requests: no` runs such a model's requests apart.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import numpy_helper, shape_inference

from .onnx_files import read_onnx_file, subgraphs

LOGGER = logging.getLogger(__name__)

_WHOLE_TENSOR: dict[tuple[str, str], str] = {
    ("", "DynamicQuantizeLinear"): "computes one quantization scale over every row of a run",
    ("com.microsoft", "DynamicQuantizeMatMul"): "computes one quantization scale over every row of a run",
    ("com.microsoft", "DynamicQuantizeLSTM"): "computes one quantization scale over every row of a run",
}
_REDUCE = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    }
)
_LARGE_INITIALIZER_BYTES = 1 << 16
"""Initializers above this size are left out of shape inference (their values are weights, never shapes),
so that inference does not copy a model's weights again at load."""

Dims = tuple[int | str | None, ...] | None  # None: rank unknown


class _AllAxes:
    """A reduction over every axis (no axes given)."""


class _RuntimeAxes:
    """Axes given by a tensor computed at run time."""


ALL_AXES, RUNTIME_AXES = _AllAxes(), _RuntimeAxes()
Axes = Sequence[int] | _AllAxes | _RuntimeAxes


@dataclass(frozen=True)
class RowMixing:
    """A node that makes one row's answer depend on the other rows of its run."""

    node: str
    op_type: str
    why: str

    def describe(self) -> str:
        return f"node {self.node!r} ({self.op_type}) {self.why}"


@dataclass
class _Graphs:
    """What the checks read: tensor shapes, constant values, and the batch axis's names."""

    shapes: dict[str, Dims]
    constants: dict[str, list[int] | None]
    batch_names: set[str]
    opset: int

    def rank(self, name: str) -> int | None:
        dims = self.shapes.get(name)
        return None if dims is None else len(dims)

    def may_be_batch(self, name: str) -> bool:
        """Whether axis 0 of tensor `name` may be the batch axis."""
        dims = self.shapes.get(name)
        if dims is not None and not dims:
            return False  # a scalar has no axis 0
        first = None if dims is None else dims[0]
        if isinstance(first, int):
            return False
        return first is None or first in self.batch_names

    def axes_input(self, node: onnx.NodeProto, index: int) -> list[int] | _RuntimeAxes | None:
        """The axes an input gives: its constant values, RUNTIME_AXES, or None when it is not given."""
        if len(node.input) <= index or not node.input[index]:
            return None
        values = self.constants.get(node.input[index])
        return RUNTIME_AXES if values is None else values


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    value = _attribute(node, name, default)
    return int(value) if isinstance(value, int) else default


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    value = _attribute(node, name, None)
    return [int(v) for v in value] if isinstance(value, list) else None


def _dims(value_info: onnx.ValueInfoProto) -> Dims:
    tensor_type = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    return tuple(
        int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim
    )


def _constant_values(tensor: onnx.TensorProto) -> list[int] | None:
    """An integer tensor's values (axes), None when they are not in the file (external or not integers)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type not in (
        onnx.TensorProto.INT64,
        onnx.TensorProto.INT32,
    ):
        return None
    return [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]


def _slim(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its large initializers' data marked as not loaded (shape inference reads only dims)."""
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) > _LARGE_INITIALIZER_BYTES:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", "(left out of shape inference)"
    return model


def _read(model: onnx.ModelProto) -> _Graphs:
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as error:  # a graph onnx cannot infer: the checks see the shapes the file states
        LOGGER.debug("ONNX shape inference failed (%s); checking with the file's own shapes", error)
        inferred = model
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    graphs = _Graphs({}, {}, set(), opset)
    initializers = {tensor.name for tensor in inferred.graph.initializer}
    for value_info in inferred.graph.input:
        dims = _dims(value_info)
        if value_info.name not in initializers and dims and isinstance(dims[0], str):
            graphs.batch_names.add(dims[0])
    for graph in subgraphs(inferred.graph):
        for value_info in (*graph.input, *graph.output, *graph.value_info):
            graphs.shapes[value_info.name] = _dims(value_info)
        for tensor in graph.initializer:
            graphs.shapes[tensor.name] = tuple(int(d) for d in tensor.dims)
            graphs.constants[tensor.name] = _constant_values(tensor)
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                value = _attribute(node, "value", None)
                if isinstance(value, onnx.TensorProto):
                    graphs.shapes[node.output[0]] = tuple(int(d) for d in value.dims)
                    graphs.constants[node.output[0]] = _constant_values(value)
                ints = _ints(node, "value_ints")
                if ints is not None:
                    graphs.constants[node.output[0]] = ints
    return graphs


def _reduced_axes(node: onnx.NodeProto, graphs: _Graphs) -> list[tuple[int, Axes]]:
    """(input index, the axes of that input the node computes across) for the ops the rule checks."""
    op = node.op_type
    if op in _REDUCE:
        given = _ints(node, "axes")
        axes = given if given is not None else graphs.axes_input(node, 1)
        if isinstance(axes, _RuntimeAxes):
            return [(0, axes)]
        if axes:
            return [(0, axes)]
        return [] if _int(node, "noop_with_empty_axes", 0) else [(0, ALL_AXES)]
    if op in ("ArgMax", "ArgMin"):
        return [(0, [_int(node, "axis", 0)])]
    if op in ("TopK", "LpNormalization"):
        return [(0, [_int(node, "axis", -1)])]
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        # Before opset 13 the axis (default 1) splits the tensor into [rows, the rest] and computes over
        # the rest: axis 0 only when it says 0. From 13 on, over the one axis (default -1).
        return [(0, [_int(node, "axis", -1 if graphs.opset >= 13 else 1)])]
    if op == "LayerNormalization":  # normalises over [axis, rank): axis 0 only when it says 0
        return [(0, [_int(node, "axis", -1)])]
    if op == "MeanVarianceNormalization":
        return [(0, _ints(node, "axes") or [0, 2, 3])]
    if op == "CumSum":
        axis = graphs.axes_input(node, 1)
        return [(0, RUNTIME_AXES if axis is None else axis)]
    if op in ("MatMul", "MatMulInteger"):
        # A's last axis and B's second to last (its only one when B is a vector) are contracted.
        b_axis = 0 if len(node.input) > 1 and graphs.rank(node.input[1]) == 1 else -2
        return [(0, [-1]), (1, [b_axis])]
    if op == "Gemm":
        return [(0, [0 if _int(node, "transA", 0) else 1]), (1, [1 if _int(node, "transB", 0) else 0])]
    return []


def _mixes(node: onnx.NodeProto, graphs: _Graphs) -> str | None:
    """Why `node` mixes rows, or None."""
    why = _WHOLE_TENSOR.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
    if why is not None:
        return why
    if node.op_type == "BatchNormalization" and _int(node, "training_mode", 0):
        return "computes its statistics over the batch (training_mode 1)"
    for index, axes in _reduced_axes(node, graphs):
        name = node.input[index] if index < len(node.input) else ""
        if not name or not graphs.may_be_batch(name):
            continue
        if isinstance(axes, _RuntimeAxes):
            return f"computes along axes of {name!r} given at run time, which may include the batch axis"
        if isinstance(axes, _AllAxes):
            return f"computes over every axis of {name!r}, the batch axis included (no axes given)"
        rank = graphs.rank(name)
        if any(axis == 0 or (rank is not None and axis + rank == 0) for axis in axes):
            return f"computes along axis 0 of {name!r}, the batch axis"
    return None


def find_row_mixing(model: onnx.ModelProto) -> RowMixing | None:
    """The first node of `model` that mixes rows across the batch axis, or None (the module's rule).
    The model is changed: large initializers lose their data (load it for this only)."""
    graphs = _read(_slim(model))
    nodes = [node for graph in subgraphs(model.graph) for node in graph.node]
    nodes += [node for function in model.functions for node in function.node]
    for node in nodes:
        why = _mixes(node, graphs)
        if why is not None:
            return RowMixing(node.name or (node.output[0] if node.output else ""), node.op_type, why)
    return None


def row_mixing_in_file(path: Path) -> RowMixing | None:
    """find_row_mixing for an ONNX file, read without its external data."""
    return find_row_mixing(read_onnx_file(path))
