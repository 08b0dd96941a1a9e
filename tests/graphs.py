"""Small ONNX graphs built in the tests, covering what the demo does not: several inputs and outputs,
int64/bool/fp16, every element type, data-dependent output shapes, runtime failures."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from triton_ort.onnx_files import save_model


def save(graph: onnx.GraphProto, path: Path) -> Path:
    """The graph as an ONNX file of the project's opset, readable by the installed ORT."""
    return save_model(graph, path)


def multi_io(path: Path) -> Path:
    """a fp16[b,3] -> a+a; b int64[b,4] -> sum over axis 1 [b,1]; c bool[b,2] -> not c."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "a"], ["a_twice"]),
            helper.make_node("ReduceSum", ["b", "axes"], ["b_sum"], keepdims=1),
            helper.make_node("Not", ["c"], ["c_not"]),
        ],
        "multi_io",
        [
            v("a", TensorProto.FLOAT16, ["batch", 3]),
            v("b", TensorProto.INT64, ["batch", 4]),
            v("c", TensorProto.BOOL, ["batch", 2]),
        ],
        [
            v("a_twice", TensorProto.FLOAT16, ["batch", 3]),
            v("b_sum", TensorProto.INT64, ["batch", 1]),
            v("c_not", TensorProto.BOOL, ["batch", 2]),
        ],
        initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    return save(graph, path)


def identity(path: Path, element_type: int) -> Path:
    """x[b,2] -> y, for one element type."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [v("x", element_type, ["batch", 2])],
        [v("y", element_type, ["batch", 2])],
    )
    return save(graph, path)


def nonzero(path: Path) -> Path:
    """x float[b,4] -> indices of its non-zero entries: int64[2, ?], a data-dependent shape."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["indices"])],
        "nonzero",
        [v("x", TensorProto.FLOAT, ["batch", 4])],
        [v("indices", TensorProto.INT64, [2, None])],
    )
    return save(graph, path)


def reshape_to(path: Path) -> Path:
    """x float[b,6] reshaped to `shape` int64[2]: ORT reads a shape on the host, even in a CUDA session."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "reshape_to",
        [v("x", TensorProto.FLOAT, ["batch", 6]), v("shape", TensorProto.INT64, [2])],
        [v("y", TensorProto.FLOAT, [None, None])],
    )
    return save(graph, path)


def pairwise_add(path: Path) -> Path:
    """x[b,n] + y[b,m]: only valid when n == m, so ORT fails at run time for a request where they differ."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        "pairwise_add",
        [v("x", TensorProto.FLOAT, ["batch", "n"]), v("y", TensorProto.FLOAT, ["batch", "m"])],
        [v("z", TensorProto.FLOAT, ["batch", "n"])],
    )
    return save(graph, path)


def gather_elements(path: Path) -> Path:
    """out[b,1] = x[b, idx[b]]: an index out of range fails inside ORT, for that request's values only."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "idx"], ["out"], axis=1)],
        "gather_elements",
        [v("x", TensorProto.FLOAT, ["batch", 4]), v("idx", TensorProto.INT64, ["batch", 1])],
        [v("out", TensorProto.FLOAT, ["batch", 1])],
    )
    return save(graph, path)


def blowup(path: Path) -> Path:
    """x float[b,1], size int64[b,1] -> out = ReduceMax(Expand(x, [1, max(size)]), axis 1) = x.

    The answer is x for any size; the memory ORT needs is b * max(size) floats."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["size"], ["widest"], keepdims=0),
            helper.make_node("Reshape", ["widest", "one_dim"], ["widest_1d"]),
            helper.make_node("Concat", ["one", "widest_1d"], ["shape"], axis=0),
            helper.make_node("Expand", ["x", "shape"], ["wide"]),
            helper.make_node("ReduceMax", ["wide"], ["out"], axes=[1], keepdims=1),  # opset 17: attribute
        ],
        "blowup",
        [v("x", TensorProto.FLOAT, ["batch", 1]), v("size", TensorProto.INT64, ["batch", 1])],
        [v("out", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            helper.make_tensor("one_dim", TensorProto.INT64, [1], [1]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        ],
    )
    return save(graph, path)


def strings_beside_numbers(path: Path) -> Path:
    """s string[b] -> t = s (strings out); x float[b,2] -> y = x + x (numbers beside them)."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"]), helper.make_node("Add", ["x", "x"], ["y"])],
        "strings_beside_numbers",
        [v("s", TensorProto.STRING, ["batch"]), v("x", TensorProto.FLOAT, ["batch", 2])],
        [v("t", TensorProto.STRING, ["batch"]), v("y", TensorProto.FLOAT, ["batch", 2])],
    )
    return save(graph, path)


LABELS = ("cat", "dog", "bird")


def label_encoder(path: Path) -> Path:
    """s string[b, 1] -> id int64[b, 1] (LabelEncoder over LABELS, -1 for others) and t = s (strings out);
    x float[b, 2] -> y = x + x beside them: strings in, numbers and strings out, numbers alongside."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node(
                "LabelEncoder",
                ["s"],
                ["id"],
                domain="ai.onnx.ml",
                keys_strings=list(LABELS),
                values_int64s=list(range(len(LABELS))),
                default_int64=-1,
            ),
            helper.make_node("Identity", ["s"], ["t"]),
            helper.make_node("Add", ["x", "x"], ["y"]),
        ],
        "label_encoder",
        [v("s", TensorProto.STRING, ["batch", 1]), v("x", TensorProto.FLOAT, ["batch", 2])],
        [
            v("id", TensorProto.INT64, ["batch", 1]),
            v("t", TensorProto.STRING, ["batch", 1]),
            v("y", TensorProto.FLOAT, ["batch", 2]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    return save_model(helper.make_model(graph, opset_imports=opsets), path)
