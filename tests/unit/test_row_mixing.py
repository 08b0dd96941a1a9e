"""triton_ort.model.row_mixing on small graphs built here: which graphs make one row's answer depend on the
rows run beside it (and so must not gather requests), and the ordinary ones that may."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support import graphs
from tests.support.paths import demo_onnx
from triton_ort.model.onnx_files import readable_model
from triton_ort.model.row_mixing import find_row_mixing, row_mixing_in_file

v = helper.make_tensor_value_info


def one_node(
    node: onnx.NodeProto,
    x_shape: list[int | str | None] | None = None,
    y_shape: list[int | str | None] | None = None,
    initializers: list[onnx.TensorProto] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """x float[batch, 8] -> node -> y."""
    graph = helper.make_graph(
        [node],
        "one_node",
        [v("x", TensorProto.FLOAT, ["batch", 8] if x_shape is None else x_shape)],
        [v("y", TensorProto.FLOAT, y_shape)],
        initializer=initializers or [],
    )
    return readable_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def axes(*values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), "axes")


def test_a_dynamically_quantized_model_mixes_rows_and_its_float_original_does_not(tmp_path: Path) -> None:
    found = row_mixing_in_file(graphs.quantized_mlp(tmp_path / "q.onnx"))
    assert found is not None and found.op_type == "DynamicQuantizeLinear"
    assert (
        "quantization scale over every row" in found.describe() and "'x_QuantizeLinear'" in found.describe()
    )
    assert row_mixing_in_file(tmp_path / "q_float.onnx") is None  # the MLP it was made from


def test_the_demo_mlp_does_not_mix_rows() -> None:
    assert row_mixing_in_file(demo_onnx()) is None


@pytest.mark.parametrize(
    ("model", "mixes"),
    [
        (one_node(helper.make_node("ReduceMean", ["x"], ["y"], axes=[0])), True),
        (one_node(helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])), False),
        (one_node(helper.make_node("ReduceMean", ["x"], ["y"], axes=[-2])), True),  # rank 2: axis 0
        (one_node(helper.make_node("ReduceMean", ["x"], ["y"])), True),  # no axes: every axis
        (one_node(helper.make_node("ReduceSum", ["x", "axes"], ["y"]), initializers=[axes(1)]), False),
        (one_node(helper.make_node("ReduceSum", ["x", "axes"], ["y"]), initializers=[axes(0, 1)]), True),
        (one_node(helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)), False),
        (one_node(helper.make_node("ArgMax", ["x"], ["y"])), True),  # ArgMax's default axis is 0
        (one_node(helper.make_node("ArgMax", ["x"], ["y"], axis=1)), False),
        (one_node(helper.make_node("Softmax", ["x"], ["y"])), False),  # opset 13+: the last axis
        (one_node(helper.make_node("Softmax", ["x"], ["y"], axis=0)), True),
        (
            one_node(
                helper.make_node("LayerNormalization", ["x", "g"], ["y"]),
                initializers=[numpy_helper.from_array(np.ones(8, np.float32), "g")],
            ),
            False,
        ),
        (
            one_node(
                helper.make_node("BatchNormalization", ["x", "s", "b", "m", "var"], ["y"], training_mode=1)
            ),
            True,
        ),
        (one_node(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])), True),
        (one_node(helper.make_node("Gemm", ["x", "x"], ["y"], transA=1)), True),  # x^T x: over the rows
    ],
    ids=[
        "ReduceMean-axis-0",
        "ReduceMean-axis-1",
        "ReduceMean-axis-minus-2",
        "ReduceMean-no-axes",
        "ReduceSum-axes-input-1",
        "ReduceSum-axes-input-0-1",
        "ReduceSum-noop",
        "ArgMax-default",
        "ArgMax-axis-1",
        "Softmax-default",
        "Softmax-axis-0",
        "LayerNormalization-last-axis",
        "BatchNormalization-training",
        "DynamicQuantizeLinear",
        "Gemm-transA",
    ],
)
def test_ops_that_compute_across_the_batch_axis_are_found(model: onnx.ModelProto, mixes: bool) -> None:
    found = find_row_mixing(model)
    assert (found is not None) == mixes, found


def test_a_reduction_over_axis_0_of_a_tensor_without_a_batch_axis_does_not_mix_rows() -> None:
    """A weight's axis 0 has a fixed size: reducing it is no reduction over requests."""
    weight = numpy_helper.from_array(np.ones((3, 8), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["w"], ["w_sum"], axes=[0], keepdims=1),
            helper.make_node("Mul", ["x", "w_sum"], ["y"]),
        ],
        "weight_sum",
        [v("x", TensorProto.FLOAT, ["batch", 8])],
        [v("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[weight],
    )
    model = readable_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert find_row_mixing(model) is None


def test_axes_computed_at_run_time_count_as_the_batch_axis_and_an_unknown_rank_as_features() -> None:
    shape_axes = helper.make_node("Shape", ["x"], ["shape"], start=0, end=1)
    model = one_node(helper.make_node("ReduceSum", ["x", "runtime_axes"], ["y"]))
    model.graph.node.insert(0, helper.make_node("Sub", ["shape", "shape"], ["runtime_axes"]))
    model.graph.node.insert(0, shape_axes)
    found = find_row_mixing(model)
    assert found is not None and "given at run time" in found.why
    # x of unknown rank: its last axis is taken as a feature axis, axis 0 as the batch
    unknown_rank = one_node(helper.make_node("Softmax", ["x"], ["y"]))
    unknown_rank.graph.input[0].type.tensor_type.ClearField("shape")
    assert find_row_mixing(unknown_rank) is None
    explicit_zero = one_node(helper.make_node("Softmax", ["x"], ["y"], axis=0))
    explicit_zero.graph.input[0].type.tensor_type.ClearField("shape")
    assert find_row_mixing(explicit_zero) is not None


def test_nodes_inside_a_subgraph_are_checked() -> None:
    body = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"])],
        "then",
        [],
        [v("q", TensorProto.UINT8, None)],
    )
    condition = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body)
    found = find_row_mixing(one_node(node, initializers=[condition]))
    assert found is not None and found.op_type == "DynamicQuantizeLinear"
