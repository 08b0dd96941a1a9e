"""Small ONNX graphs built in the tests, covering what the demo does not: several inputs and outputs,
int64/bool/fp16, every element type, data-dependent output shapes, runtime failures."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from triton_ort.model.onnx_files import save_model


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


def cpu_node_between(path: Path) -> Path:
    """x float[b, 2] -> Relu -> Scaler (ai.onnx.ml: a CPU-only kernel) -> Relu -> y: on a GPU session the
    middle node runs on the CPU between two CUDA nodes, with copies around it."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Scaler", ["r"], ["s"], domain="ai.onnx.ml", offset=[1.0], scale=[2.0]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        "cpu_node_between",
        [v("x", TensorProto.FLOAT, ["batch", 2])],
        [v("y", TensorProto.FLOAT, ["batch", 2])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    return save_model(helper.make_model(graph, opset_imports=opsets), path)


SCALE_DEFAULT = 2.0


def overridable(path: Path) -> Path:
    """y = x * scale + offset, x float[b,4]; `scale` float[1] (default SCALE_DEFAULT) and `offset`
    float[b,4] (default zeros [1,4]) are initializers listed as graph inputs: defaults that a request may
    override (ORT's overridable initializers). `scale` has no batch axis (one value per request), `offset`
    has one."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "offset"], ["y"]),
        ],
        "overridable",
        [
            v("x", TensorProto.FLOAT, ["batch", 4]),
            v("scale", TensorProto.FLOAT, [1]),
            v("offset", TensorProto.FLOAT, ["batch", 4]),
        ],
        [v("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[
            helper.make_tensor("scale", TensorProto.FLOAT, [1], [SCALE_DEFAULT]),
            helper.make_tensor("offset", TensorProto.FLOAT, [1, 4], [0.0] * 4),
        ],
    )
    return save(graph, path)


def scalar_default(path: Path) -> Path:
    """y = x * t, x float[b,2]; `t` a scalar initializer listed as a graph input (default 0.5)."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "t"], ["y"])],
        "scalar_default",
        [v("x", TensorProto.FLOAT, ["batch", 2]), v("t", TensorProto.FLOAT, [])],
        [v("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[helper.make_tensor("t", TensorProto.FLOAT, [], [0.5])],
    )
    return save(graph, path)


MLP_FEATURES = 16


def mlp(path: Path, seed: int = 0) -> Path:
    """x float[b,16] -> Gemm(16x32) -> Relu -> Gemm(32x3) -> logits float[b,3]: the demo's kind of model."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
            helper.make_node("Relu", ["h"], ["h_relu"]),
            helper.make_node("Gemm", ["h_relu", "w2", "b2"], ["logits"], transB=1),
        ],
        "mlp",
        [v("x", TensorProto.FLOAT, ["batch", MLP_FEATURES])],
        [v("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[weight("w1", 32, MLP_FEATURES), weight("b1", 32), weight("w2", 3, 32), weight("b2", 3)],
    )
    return save(graph, path)


def quantized_mlp(path: Path) -> Path:
    """`mlp` through onnxruntime.quantization.quantize_dynamic: DynamicQuantizeLinear computes one scale
    over its whole input, so each row's answer depends on the rows run beside it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    float_model = mlp(path.with_name(f"{path.stem}_float.onnx"))
    path.parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(str(float_model), str(path), weight_type=QuantType.QInt8)
    return path


def bf16_doubler(path: Path) -> Path:
    """y = 2 x in bfloat16, x and y bfloat16[b, 4] (computed in float32 between two Casts, which ORT's CPU
    provider has for bfloat16)."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["x32", "x32"], ["y32"]),
            helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.BFLOAT16),
        ],
        "bf16_doubler",
        [v("x", TensorProto.BFLOAT16, ["batch", 4])],
        [v("y", TensorProto.BFLOAT16, ["batch", 4])],
    )
    return save(graph, path)


def custom_op(path: Path, domain: str = "com.example", op_type: str = "MyFancyOp") -> Path:
    """x float[b, 4] -> node 'fancy' (`domain`:`op_type`, a custom operator) -> (neg, pos) float[b, 4].
    The default domain no library implements; onnxruntime-extensions' NegPos (ai.onnx.contrib) splits x
    into its negative and positive parts."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["neg", "pos"], name="fancy", domain=domain)],
        "custom_op",
        [v("x", TensorProto.FLOAT, ["batch", 4])],
        [v("neg", TensorProto.FLOAT, ["batch", 4]), v("pos", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    )
    return save_model(model, path)


def contrib_negpos(path: Path) -> Path:
    """custom_op with onnxruntime-extensions' NegPos (domain ai.onnx.contrib)."""
    return custom_op(path, "ai.onnx.contrib", "NegPos")


def decoder_step(path: Path) -> Path:
    """A decoder step's cache: present[b, total_sequence] = Concat(past, x) along axis 1, named like the
    attention mask's axis, as exported decoders name it. ORT computes past + sequence; a mask longer than
    that gives the output another size than its axis name says. logits[b, sequence] = x."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["past", "x"], ["present"], axis=1),
            helper.make_node("Identity", ["x"], ["logits"]),
        ],
        "decoder_step",
        [
            v("x", TensorProto.FLOAT, ["batch", "sequence"]),
            v("past", TensorProto.FLOAT, ["batch", "past_sequence"]),
            v("attention_mask", TensorProto.INT64, ["batch", "total_sequence"]),
        ],
        [
            v("present", TensorProto.FLOAT, ["batch", "total_sequence"]),
            v("logits", TensorProto.FLOAT, ["batch", "sequence"]),
        ],
    )
    return save(graph, path)


def embedding_lookup(path: Path) -> Path:
    """ids int64[b,n] through Cast and Unsqueeze into a Gather of a [50, 4] table, and kind int32[b,1] into a
    [3, 4] one: out[b,n,4] = table[ids] + kinds[kind]; mask int64[b,n] multiplies in (no table)."""
    v = helper.make_tensor_value_info
    table = helper.make_tensor("table", TensorProto.FLOAT, [50, 4], [i / 200 for i in range(200)])
    kinds = helper.make_tensor("kinds", TensorProto.FLOAT, [3, 4], [float(i) for i in range(12)])
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
            helper.make_node("Gather", ["table", "ids32"], ["rows"], name="word_lookup"),
            helper.make_node("Squeeze", ["kind", "squeeze_axes"], ["kind_flat"]),
            helper.make_node("Gather", ["kinds", "kind_flat"], ["kind_rows"]),
            helper.make_node("Unsqueeze", ["kind_rows", "squeeze_axes"], ["kind_rows_3d"]),
            helper.make_node("Add", ["rows", "kind_rows_3d"], ["summed"]),
            helper.make_node("Cast", ["mask"], ["mask_float"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask_float", "last_axis"], ["mask_3d"]),
            helper.make_node("Mul", ["summed", "mask_3d"], ["out"]),
        ],
        "embedding_lookup",
        [
            v("ids", TensorProto.INT64, ["batch", "n"]),
            v("kind", TensorProto.INT32, ["batch", 1]),
            v("mask", TensorProto.INT64, ["batch", "n"]),
        ],
        [v("out", TensorProto.FLOAT, ["batch", "n", 4])],
        initializer=[
            table,
            kinds,
            helper.make_tensor("squeeze_axes", TensorProto.INT64, [1], [1]),
            helper.make_tensor("last_axis", TensorProto.INT64, [1], [2]),
        ],
    )
    return save(graph, path)
