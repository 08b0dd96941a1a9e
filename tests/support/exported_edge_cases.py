"""The second repository of exported models, the exporters' edge cases
(tests/integration/test_exported_edge_cases.py), built at test time from pip packages like the first
(tests/support/exported.py): what exporters and converters write that the first does not cover. Each builder
takes the path of the ONNX file to write and returns it.

- quantized_mlp: an MLP through onnxruntime.quantization.quantize_dynamic. Its DynamicQuantizeLinear
  computes one scale over the whole tensor, so a row's answer depends on the rows run beside it.
- temperature_classifier: a graph input that also has an initializer (an overridable default).
- dynamo_mlp: torch.onnx.export(..., dynamo=True): opset 18+ and IR 10, as that exporter writes them.
- exporter_names: tensor names as exporters spell them (TorchScript's `input.1`, TensorFlow's `x:0` and
  `out/logits:0`), around LpNormalization between two MatMuls (chosen as an op without a CUDA kernel
  from ORT's docs/OperatorKernels.md; ORT 1.31.1's CUDA EP runs it on the GPU host all the same).
- image_statistics: a uint8 NHWC image in (as an image decoder hands it over), int32 and bool out.
- sklearn_regressor: a scikit-learn pipeline in float64 through skl2onnx.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper

from tests.support import graphs
from triton_ort.model.onnx_files import save_model

MLP_FEATURES = 16
IMAGE_SIDE = 8
"""Height and width of the image model's input: 64 pixels, so a channel's mean is a sum of integers
divided by a power of two, and the sum of the three means is exact in float32 on every provider whatever
the order of summation: the bool answer compares exactly, and so does the int32 one where no two channels
tie (which index a tie gives is the provider's choice)."""
REGRESSOR_FEATURES = 5
NAMES_FEATURES = 4
DEFAULT_TEMPERATURE = 2.0


def _weights(rng: np.random.Generator, *shape: int) -> NDArray[np.float32]:
    weights: NDArray[np.float32] = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    return weights


def quantized_mlp(path: Path) -> Path:
    """x float[batch, 16] -> MatMul, Add, Relu, MatMul, Add -> y float[batch, 4], float weights written
    by onnx.helper, then dynamically quantized (int8 weights; uint8 activations quantized at run time, one
    scale and zero point per tensor: the whole batch)."""
    from onnxruntime.quantization import quantize_dynamic

    rng = np.random.default_rng(10)
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Add", ["h", "b1"], ["h_biased"]),
            helper.make_node("Relu", ["h_biased"], ["hidden"]),
            helper.make_node("MatMul", ["hidden", "w2"], ["o"]),
            helper.make_node("Add", ["o", "b2"], ["y"]),
        ],
        "mlp",
        [v("x", TensorProto.FLOAT, ["batch", MLP_FEATURES])],
        [v("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[
            numpy_helper.from_array(_weights(rng, MLP_FEATURES, 32), "w1"),
            numpy_helper.from_array(_weights(rng, 32).ravel() * 0.1, "b1"),
            numpy_helper.from_array(_weights(rng, 32, 4), "w2"),
            numpy_helper.from_array(_weights(rng, 4).ravel() * 0.1, "b2"),
        ],
    )
    float_path = save_model(graph, path.with_name(f"{path.stem}.float.onnx"))
    path.parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(str(float_path), str(path))
    return path


def temperature_classifier(path: Path) -> Path:
    """x float[batch, 4] -> probs = Softmax(x W / temperature) [batch, 3]. `temperature` float[batch, 1] is
    a graph input with an initializer ([[2.0]]): a caller may send one per row, or leave it to the
    default (ORT broadcasts the [1, 1] default over the rows)."""
    rng = np.random.default_rng(11)
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["logits"]),
            helper.make_node("Div", ["logits", "temperature"], ["scaled"]),
            helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        ],
        "temperature_classifier",
        [
            v("x", TensorProto.FLOAT, ["batch", 4]),
            v("temperature", TensorProto.FLOAT, ["batch", 1]),
        ],
        [v("probs", TensorProto.FLOAT, ["batch", 3])],
        initializer=[
            numpy_helper.from_array(_weights(rng, 4, 3), "w"),
            numpy_helper.from_array(np.array([[DEFAULT_TEMPERATURE]], np.float32), "temperature"),
        ],
    )
    return graphs.save(graph, path)


def dynamo_mlp(path: Path) -> Path:
    """torch's Linear, LayerNorm, GELU, Linear, softmax through the dynamo exporter (torch.export; needs
    onnxscript), the batch axis dynamic: features float[batch, 8] -> probs float[batch, 3]. Saved as the
    exporter writes it (its opset and IR version), weights inside the file."""
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(8, 32)
            self.norm = torch.nn.LayerNorm(32)
            self.head = torch.nn.Linear(32, 3)

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            hidden = torch.nn.functional.gelu(self.norm(self.hidden(features)))
            return torch.softmax(self.head(hidden), dim=-1)

    torch.manual_seed(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.export's deprecation notices
        torch.onnx.export(
            Classifier().eval(),
            (torch.randn(2, 8),),
            str(path),
            dynamo=True,
            dynamic_shapes={"features": {0: torch.export.Dim("batch")}},
            input_names=["features"],
            output_names=["probs"],
            external_data=False,
            verbose=False,
        )
    return path


def exporter_names(path: Path) -> Path:
    """Tensor names as exporters spell them, around LpNormalization: `input.1` and `x:0`
    float[batch, 4] -> Add -> MatMul -> LpNormalization (p=2, last axis) -> MatMul -> `out/logits:0`
    float[batch, 3], and `probs:0` its softmax. ORT's docs/OperatorKernels.md lists no CUDA kernel for
    LpNormalization, but ORT 1.31.1's CUDA EP placed it on the GPU (its profile on the H200, 2026-12-02)."""
    rng = np.random.default_rng(12)
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["input.1", "x:0"], ["onnx::MatMul_3"]),
            helper.make_node("MatMul", ["onnx::MatMul_3", "dense/kernel:0"], ["dense/MatMul:0"]),
            helper.make_node("LpNormalization", ["dense/MatMul:0"], ["l2_normalize:0"], axis=-1, p=2),
            helper.make_node("MatMul", ["l2_normalize:0", "out/kernel:0"], ["out/logits:0"]),
            helper.make_node("Softmax", ["out/logits:0"], ["probs:0"], axis=-1),
        ],
        "exporter_names",
        [
            v("input.1", TensorProto.FLOAT, ["batch", NAMES_FEATURES]),
            v("x:0", TensorProto.FLOAT, ["batch", NAMES_FEATURES]),
        ],
        [
            v("out/logits:0", TensorProto.FLOAT, ["batch", 3]),
            v("probs:0", TensorProto.FLOAT, ["batch", 3]),
        ],
        initializer=[
            numpy_helper.from_array(_weights(rng, NAMES_FEATURES, 16), "dense/kernel:0"),
            numpy_helper.from_array(_weights(rng, 16, 3), "out/kernel:0"),
        ],
    )
    return graphs.save(graph, path)


def image_statistics(path: Path) -> Path:
    """A torch module through the TorchScript exporter: image uint8[batch, 8, 8, 3] (NHWC) ->
    channel_mean float[batch, 3], dominant int32[batch, 1] (the brightest channel), bright bool[batch, 1]
    (the three means above 127.5 on average, compared as their exact sum)."""
    import torch

    class ImageStatistics(torch.nn.Module):
        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            channel_mean = image.permute(0, 3, 1, 2).float().mean(dim=(2, 3))
            dominant = channel_mean.argmax(dim=1, keepdim=True).to(torch.int32)
            bright = channel_mean.sum(dim=1, keepdim=True) > 3 * 127.5
            return channel_mean, dominant, bright

    path.parent.mkdir(parents=True, exist_ok=True)
    names = ["channel_mean", "dominant", "bright"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            ImageStatistics(),
            (torch.zeros(2, IMAGE_SIDE, IMAGE_SIDE, 3, dtype=torch.uint8),),
            str(path),
            input_names=["image"],
            output_names=names,
            dynamic_axes={name: {0: "batch"} for name in ["image", *names]},
            opset_version=17,
            dynamo=False,
        )
    return save_model(onnx.load(str(path)), path)


def sklearn_regressor(path: Path) -> Path:
    """StandardScaler + MLPRegressor fitted and converted in float64: X double[N, 5] -> variable
    double[N, 1] (skl2onnx keeps the training data's type)."""
    from skl2onnx import to_onnx
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(13)
    x = rng.standard_normal((200, REGRESSOR_FEATURES))
    y = 3 * x[:, 0] + np.sin(x[:, 1]) + 1e-3 * x[:, 2]
    regressor = MLPRegressor(hidden_layer_sizes=(16,), max_iter=200, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: the fit's quality does not matter here
        pipeline = make_pipeline(StandardScaler(), regressor).fit(x, y)
    return save_model(to_onnx(pipeline, x[:1], target_opset=17), path)
