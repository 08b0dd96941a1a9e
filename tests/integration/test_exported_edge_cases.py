"""The second repository of exported models, the exporters' edge cases (built in
tests/support/exported_edge_cases.py), served with the two-line config by one server, every answer compared
with the same request alone through in-process ONNX Runtime over HTTP and gRPC at once: a dynamically
quantized MLP under 20 concurrent requests, an overridable initializer sent by some requests and left to its
default by others, a model of torch's dynamo exporter (opset 18+, IR 10), exporter-style tensor names, a
uint8 NHWC image with int32 and bool answers, a float64 scikit-learn regressor, and an op without a CUDA
kernel between two GPU ops.

On the GPU test host the instances are GPU ones (scripts/gpu_check.sh tiers) and the reference stays ORT on
the CPU: fp32 answers are compared within SERVER_TOLERANCE (tests/support/paths.py), which there allows for
the CUDA EP's default TF32 GEMMs. float64 has no TF32 and compares within 1e-12 everywhere; integer and bool
answers compare exactly (the image model's are exact on every provider: tests/support/exported_edge_cases.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from tests.support import exported, exported_edge_cases
from tests.support.exported import Exported, Served, check_answers, close
from tests.support.paths import Tolerance
from triton_ort.harness.server import LocalTritonServer, gpu_present
from triton_ort.harness.transport import PROTOCOLS, make_client, model_config, model_metadata
from triton_ort.runtime.providers import CPU_EP, CUDA_EP, preload_cuda_libraries

pytestmark = pytest.mark.integration

MODELS = {
    "quantized_mlp": Exported(exported_edge_cases.quantized_mlp),
    "temperature": Exported(exported_edge_cases.temperature_classifier),
    "dynamo_mlp": Exported(exported_edge_cases.dynamo_mlp, needs=("torch", "onnxscript")),
    "exporter_names": Exported(exported_edge_cases.exporter_names),
    "image": Exported(exported_edge_cases.image_statistics, needs=("torch",)),
    "regressor": Exported(exported_edge_cases.sklearn_regressor, needs=("skl2onnx",)),
}
ROW_MIXING_REQUESTS = 20
FLOAT64_TOLERANCE: Tolerance = {"rtol": 1e-12, "atol": 1e-12}
"""A float32 round trip anywhere on the way would miss this by about 1e-7."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repository = tmp_path_factory.mktemp("exported_edge_cases") / "repository"
    files, missing = exported.write_repository(repository, MODELS)
    with LocalTritonServer(repository) as server:
        yield Served(server, files, missing)


def _types(served: Served, model: str) -> dict[str, str]:
    config = model_config(make_client("http", served.url("http")), model)
    return {str(entry["name"]): str(entry["data_type"]) for entry in (*config["input"], *config["output"])}


def test_a_dynamically_quantized_mlp_answers_each_of_20_concurrent_requests_as_if_it_ran_alone(
    served: Served,
) -> None:
    """quantize_dynamic's activations take one scale over the whole batch, so a request gathered with
    others into one ORT run would be answered with its neighbours' scale. Rows of very different
    magnitudes make any such mixing show, on the GPU's tolerance too."""
    rng = np.random.default_rng(20)
    requests = [
        {"x": (rng.standard_normal((1, exported_edge_cases.MLP_FEATURES)) * 0.2 * (1 + i)).astype(np.float32)}
        for i in range(ROW_MIXING_REQUESTS)
    ]
    check_answers(served, "quantized_mlp", requests, close, workers=2 * ROW_MIXING_REQUESTS)


def test_an_overridable_initializer_is_an_optional_input_used_when_sent_and_defaulted_when_not(
    served: Served,
) -> None:
    """Requests with a temperature per row and requests without one, concurrently over both protocols
    (the dynamic batcher gathers some of each kind together); each answer is ORT's for the same feed,
    which takes the graph's [[2.0]] when the request leaves it out."""
    served.onnx_file("temperature")
    config = model_config(make_client("http", served.url("http")), "temperature")
    temperature = next((e for e in config["input"] if e["name"] == "temperature"), None)
    assert temperature is not None, f"'temperature' is not among the served inputs: {config['input']}"
    assert temperature.get("optional") is True, temperature
    rng = np.random.default_rng(21)
    requests: list[dict[str, NDArray[Any]]] = []
    for index, rows in enumerate((1, 3, 2, 4, 1, 2, 3, 1)):
        request = {"x": rng.standard_normal((rows, 4)).astype(np.float32)}
        if index % 2:
            request["temperature"] = rng.uniform(0.5, 4.0, (rows, 1)).astype(np.float32)
        requests.append(request)
    check_answers(served, "temperature", requests * 2, close)


def test_a_model_of_torchs_dynamo_exporter_answers_like_onnx_runtime(served: Served) -> None:
    model = onnx.load(str(served.onnx_file("dynamo_mlp")), load_external_data=False)
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    assert opset >= 18 and model.ir_version >= 10, (opset, model.ir_version)  # what this test is about
    rng = np.random.default_rng(22)
    requests = [{"features": rng.standard_normal((rows, 8)).astype(np.float32)} for rows in (1, 2, 5, 8)]
    check_answers(served, "dynamo_mlp", requests * 3, close)


def _exporter_names_requests(seed: int) -> list[dict[str, NDArray[Any]]]:
    rng = np.random.default_rng(seed)
    shape = (exported_edge_cases.NAMES_FEATURES,)
    return [
        {name: rng.standard_normal((rows, *shape)).astype(np.float32) for name in ("input.1", "x:0")}
        for rows in (1, 3, 6, 2, 8, 1)
    ]


def test_exporter_style_tensor_names_survive_the_config_and_both_protocols(served: Served) -> None:
    inputs, outputs = ["input.1", "x:0"], ["out/logits:0", "probs:0"]
    served.onnx_file("exporter_names")
    config = model_config(make_client("http", served.url("http")), "exporter_names")
    assert [e["name"] for e in config["input"]] == inputs
    assert [e["name"] for e in config["output"]] == outputs
    for protocol in PROTOCOLS:
        metadata = model_metadata(make_client(protocol, served.url(protocol)), "exporter_names")
        assert [t["name"] for t in metadata["inputs"]] == inputs, protocol
        assert [t["name"] for t in metadata["outputs"]] == outputs, protocol
    check_answers(served, "exporter_names", _exporter_names_requests(23), close)


def test_a_uint8_nhwc_image_model_answers_int32_and_bool(served: Served) -> None:
    served.onnx_file("image")
    assert _types(served, "image") == {
        "image": "TYPE_UINT8",
        "channel_mean": "TYPE_FP32",
        "dominant": "TYPE_INT32",
        "bright": "TYPE_BOOL",
    }
    rng = np.random.default_rng(24)
    side = exported_edge_cases.IMAGE_SIDE
    requests = [{"image": rng.integers(0, 256, (rows, side, side, 3), dtype=np.uint8)} for rows in (1, 2, 4)]
    for pixel in ((255, 200, 0), (0, 0, 30)):  # one bright with red first, one dark with blue first
        requests.append({"image": np.broadcast_to(np.array(pixel, np.uint8), (2, side, side, 3)).copy()})
    for request in requests:  # no tied channels: the brightest channel is the same on every provider
        means = np.sort(request["image"].astype(np.float64).mean(axis=(1, 2)), axis=1)
        assert (means[:, -1] > means[:, -2]).all(), "a test image with tied channels"

    def compare(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
        if name == "channel_mean":
            close(name, got, want)
        else:
            assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
            np.testing.assert_array_equal(got, want, err_msg=name)

    check_answers(served, "image", requests * 3, compare)


def test_a_float64_sklearn_regressor_answers_in_double_precision(served: Served) -> None:
    served.onnx_file("regressor")
    assert _types(served, "regressor") == {"X": "TYPE_FP64", "variable": "TYPE_FP64"}
    rng = np.random.default_rng(25)
    requests = [
        {"X": rng.standard_normal((rows, exported_edge_cases.REGRESSOR_FEATURES))} for rows in (1, 4, 7)
    ]

    def compare(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
        assert got.dtype == want.dtype == np.float64, (name, got.dtype)
        np.testing.assert_allclose(got, want, err_msg=name, **FLOAT64_TOLERANCE)

    check_answers(served, "regressor", requests * 3, compare)


def _on_cuda() -> bool:
    """The server's instances are GPU ones here, with the CUDA EP of the ORT this process has too."""
    return gpu_present() and CUDA_EP in ort.get_available_providers()


def _providers_by_op(
    onnx_path: Path, inputs: dict[str, NDArray[Any]], profile_dir: Path
) -> dict[str, set[str]]:
    """Where in-process ORT runs each op type of the model with the providers of the server's instances
    (the CUDA EP first on the GPU test host), from ORT's own profile of one run."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(profile_dir / "placement")
    if _on_cuda():
        preload_cuda_libraries()  # as the instances do: the CUDA EP finds pip's CUDA libraries
    providers = [CUDA_EP, CPU_EP] if _on_cuda() else [CPU_EP]
    session = ort.InferenceSession(str(onnx_path), options, providers=providers)
    assert session.get_providers()[0] == providers[0], session.get_providers()
    session.run(None, inputs)
    placed: dict[str, set[str]] = {}
    for event in json.loads(Path(session.end_profiling()).read_text()):
        args = event.get("args", {})
        if event.get("cat") == "Node" and "provider" in args:
            placed.setdefault(str(args["op_name"]), set()).add(str(args["provider"]))
    return placed


def test_lp_normalization_between_two_gpu_ops_answers_like_onnx_runtime(
    served: Served, tmp_path: Path
) -> None:
    """exporter_names's LpNormalization between two MatMuls, placed as ORT places it, answers as in-process
    ORT does. It was chosen as an op without a CUDA kernel, but ORT 1.31.1's CUDA EP runs it (its profile
    on the GPU test host, 2026-12-02), so there the graph runs wholly on the GPU and this does not exercise
    a CPU node between GPU ops; the MatMuls' placement on CUDA is checked where the instances are GPU
    ones."""
    onnx_path = served.onnx_file("exporter_names")
    requests = _exporter_names_requests(26)
    placed = _providers_by_op(onnx_path, requests[0], tmp_path)
    print(f"placement by op: {placed}")
    if _on_cuda():
        assert placed["MatMul"] == {CUDA_EP}, placed
    else:
        assert placed["LpNormalization"] == {CPU_EP}, placed
    check_answers(served, "exporter_names", requests, close)
