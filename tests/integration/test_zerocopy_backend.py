"""Serving ONNX files with two-line configs through the Python-based backend `onnxruntime_zerocopy`, on the
real tritonserver: auto-complete from the ONNX file, answers equal to in-process ONNX Runtime, conflicts
reported at load, warm-up at the listed batch sizes, and Triton's own model_warmup samples.

On a GPU host (KIND_GPU by default there) the same tests run the CUDA path:
    python -m pytest -q tests/integration/test_zerocopy_backend.py
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tests.support import graphs
from tests.support.paths import SERVER_TOLERANCE, demo_onnx
from triton_ort.backend import MODEL_PY
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer, model_config
from triton_ort.harness.waiting import wait_for
from triton_ort.model.autocomplete import DEFAULT_MAX_BATCH_SIZE

pytestmark = pytest.mark.integration

TWO_LINE = 'backend: "onnxruntime_zerocopy"\n'
STARTUP_MODELS = ("multi_io", "demo_mbs64", "nonzero", "warmed", "decoder_step")


PROBE_TENSORS = (
    'input [ { name: "x", data_type: TYPE_FP32, dims: [ 2 ] } ]\n'
    'output [ { name: "y", data_type: TYPE_FP32, dims: [ 2 ] } ]\n'
)
# A python model whose auto_complete_config puts FORCE_CPU_ONLY_INPUT_TENSORS into the completed config
# (the dict that as_dict() returns is the one the stub sends back), and whose initialize reports the
# parameters it was given: what Triton keeps of a completed config, and so why our backend cannot switch
# GPU inputs on for a two-line config (triton_ort.model.autocomplete.ZERO_COPY_LINE).
PARAMETERS_PROBE_MODEL_PY = """
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        parameters = config.as_dict().setdefault("parameters", {})
        parameters["FORCE_CPU_ONLY_INPUT_TENSORS"] = {"string_value": "no"}
        return config

    def initialize(self, args):
        given = json.loads(args["model_config"]).get("parameters", {})
        pb_utils.Logger.log_info("parameters probe: " + json.dumps(given))

    def execute(self, requests):
        outputs = [[pb_utils.Tensor("y", r.inputs()[0].as_numpy())] for r in requests]
        return [pb_utils.InferenceResponse(tensors) for tensors in outputs]
"""


def _model(repository: Path, name: str, onnx_file: Path | None, config: str) -> Path:
    version = repository / name / "1"
    version.mkdir(parents=True)
    if onnx_file is not None:
        shutil.copy(onnx_file, version / "model.onnx")
    (repository / name / "config.pbtxt").write_text(config)
    return version


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("zerocopy_repository")
    onnx = tmp_path_factory.mktemp("onnx")
    multi_io = graphs.multi_io(onnx / "multi_io.onnx")
    _model(root, "multi_io", multi_io, TWO_LINE)
    _model(root, "demo_mbs64", demo_onnx(), TWO_LINE + "max_batch_size: 64\n")
    _model(root, "nonzero", graphs.nonzero(onnx / "nonzero.onnx"), TWO_LINE)
    _model(root, "decoder_step", graphs.decoder_step(onnx / "decoder_step.onnx"), TWO_LINE)
    _model(
        root,
        "warmed",
        multi_io,
        TWO_LINE
        + 'max_batch_size: 8\nparameters [ { key: "warmup", value: { string_value: "2,8" } } ]\n'
        + 'model_warmup [ { name: "zeros_batch_3", batch_size: 3, inputs [\n'
        + '  { key: "a", value: { data_type: TYPE_FP16, dims: [ 3 ], zero_data: true } },\n'
        + '  { key: "b", value: { data_type: TYPE_INT64, dims: [ 4 ], zero_data: true } },\n'
        + '  { key: "c", value: { data_type: TYPE_BOOL, dims: [ 2 ], zero_data: true } } ] } ]\n',
    )
    # Loaded by the test below: it must fail with a message naming what is wrong. The messages of a config
    # that disagrees with the ONNX file and of a bad parameter are unit tests' (test_autocomplete,
    # test_warmup); test_server.py loads a disagreeing config end to end.
    _model(root, "no_onnx", None, TWO_LINE)
    probe = _model(root, "parameters_probe", None, 'backend: "python"\nmax_batch_size: 4\n' + PROBE_TENSORS)
    (probe / "model.py").write_text(PARAMETERS_PROBE_MODEL_PY)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[LocalTritonServer]:
    args = ["--model-control-mode=explicit", *(f"--load-model={name}" for name in STARTUP_MODELS)]
    with LocalTritonServer(repository, extra_args=args, log_verbose=1) as running:
        yield running


@pytest.fixture(scope="module")
def copied_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    """A model's own copy of model.py, backend python, and no tensors in its config (auto-complete too),
    beside a two-line model of our backend: before 24.04 the two backends' stubs collide under one
    explicit shared-memory prefix, so the launcher leaves Triton's default, per-backend names
    (triton_ort.harness.server.own_shm_prefix_is_safe)."""
    root = tmp_path_factory.mktemp("copied_repository")
    version = _model(root, "copied", graphs.multi_io(root / "multi_io.onnx"), 'backend: "python"\n')
    (version / "model.py").write_text(MODEL_PY)
    _model(root, "two_line", demo_onnx(), TWO_LINE + "max_batch_size: 8\n")
    with LocalTritonServer(root) as running:
        yield running


def clients(server: LocalTritonServer) -> list[Any]:
    return [
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ]


def _assert_same(got: NDArray[Any], want: NDArray[Any]) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, **SERVER_TOLERANCE)
    else:
        np.testing.assert_array_equal(got, want)


def _check_answers(
    server: LocalTritonServer, model: str, onnx_file: Path, inputs: dict[str, NDArray[Any]]
) -> None:
    want = reference_outputs(onnx_file, inputs)
    for client in clients(server):
        got, _ = infer(client, model, inputs, list(want))
        for name in want:
            _assert_same(got[name], want[name])


def multi_io_inputs(rows: int, seed: int) -> dict[str, NDArray[Any]]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.standard_normal((rows, 3)).astype(np.float16),
        "b": rng.integers(-100, 100, (rows, 4)).astype(np.int64),
        "c": rng.integers(0, 2, (rows, 2)).astype(bool),
    }


def test_one_line_config_serves_every_output(server: LocalTritonServer, repository: Path) -> None:
    onnx_file = repository / "multi_io" / "1" / "model.onnx"
    _check_answers(server, "multi_io", onnx_file, multi_io_inputs(DEFAULT_MAX_BATCH_SIZE, seed=1))


def test_two_line_config_with_max_batch_size(server: LocalTritonServer, repository: Path) -> None:
    x = np.random.default_rng(2).standard_normal((64, 2010)).astype(np.float32)
    _check_answers(server, "demo_mbs64", demo_onnx(), {"np_script_embeddings": x})


def test_model_without_a_batch_axis(server: LocalTritonServer, repository: Path) -> None:
    x = np.array([[0, 1.5, 0, 2], [3, 0, 0, 0], [0, 0, 0, 0]], dtype=np.float32)
    _check_answers(server, "nonzero", repository / "nonzero" / "1" / "model.onnx", {"x": x})


def test_an_output_sized_otherwise_than_its_axis_name_answers_as_onnx_runtime(
    server: LocalTritonServer, repository: Path
) -> None:
    """present[batch, total_sequence] with an attention mask longer than past + sequence: ORT computes
    another size than the mask's axis gives, and the served answer is ORT's (before and after such a run,
    one whose sizes agree)."""
    onnx_file = repository / "decoder_step" / "1" / "model.onnx"
    rng = np.random.default_rng(5)
    past = rng.standard_normal((2, 3)).astype(np.float32)
    x = rng.standard_normal((2, 1)).astype(np.float32)
    for mask_length in (4, 6, 6, 4):
        mask = np.ones((2, mask_length), np.int64)
        _check_answers(server, "decoder_step", onnx_file, {"x": x, "past": past, "attention_mask": mask})


def test_copied_model_py_is_completed_the_same_way(copied_server: LocalTritonServer) -> None:
    onnx_file = copied_server.model_repository / "copied" / "1" / "model.onnx"
    _check_answers(copied_server, "copied", onnx_file, multi_io_inputs(3, seed=3))
    config = model_config(httpclient.InferenceServerClient(copied_server.http_url), "copied")
    assert int(config["max_batch_size"]) == DEFAULT_MAX_BATCH_SIZE


def test_python_and_zero_copy_models_share_one_server(copied_server: LocalTritonServer) -> None:
    assert copied_server.shm_prefix is None  # Triton's per-backend region names (see the fixture)
    x = np.random.default_rng(4).standard_normal((5, 2010)).astype(np.float32)
    _check_answers(copied_server, "two_line", demo_onnx(), {"np_script_embeddings": x})
    onnx_file = copied_server.model_repository / "copied" / "1" / "model.onnx"
    _check_answers(copied_server, "copied", onnx_file, multi_io_inputs(2, seed=5))


def test_completed_config_says_what_the_onnx_file_says(server: LocalTritonServer) -> None:
    for client in clients(server):
        config = model_config(client, "multi_io")
        assert int(config["max_batch_size"]) == DEFAULT_MAX_BATCH_SIZE
        assert "dynamic_batching" in config
        tensors = [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config["input"]]
        assert tensors == [("a", "TYPE_FP16", [3]), ("b", "TYPE_INT64", [4]), ("c", "TYPE_BOOL", [2])]
        assert [t["name"] for t in config["output"]] == ["a_twice", "b_sum", "c_not"]
        nonzero = model_config(client, "nonzero")
        assert int(nonzero.get("max_batch_size", 0)) == 0 and "dynamic_batching" not in nonzero
        assert [[int(d) for d in t["dims"]] for t in nonzero["output"]] == [[2, -1]]


def test_batch_above_the_default_is_refused_by_triton(server: LocalTritonServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match=rf"batch[- ]size must be <= {DEFAULT_MAX_BATCH_SIZE}"):
        infer(client, "multi_io", multi_io_inputs(DEFAULT_MAX_BATCH_SIZE + 1, seed=4), ["a_twice"])


def test_warmup_runs_our_batch_sizes_and_tritons_samples_before_ready(server: LocalTritonServer) -> None:
    log = server.log()
    assert "warm-up run at batch size 2 took" in log
    assert "warm-up run at batch size 8 took" in log
    # Triton runs model_warmup samples through execute(); a failing one would have failed the load.
    assert "is running warmup sample 'zeros_batch_3'" in log
    assert "failed to run warmup sample" not in log


def test_a_bad_model_fails_its_load_with_the_reason_and_the_others_serve(server: LocalTritonServer) -> None:
    # A load starts an auto-complete stub and an instance stub: slow on a busy machine.
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("no_onnx")
    for part in ("model.onnx does not exist", "parameter onnx_file"):
        assert part in str(caught.value)
    assert client.is_model_ready("multi_io")  # the other models go on serving


def test_auto_complete_cannot_add_parameters_so_the_zero_copy_line_is_the_configs(
    server: LocalTritonServer,
) -> None:
    """Triton core keeps max_batch_size, tensors, scheduler and transaction policy of a completed config
    and drops the rest (core src/backend_model.cc, TritonModel::UpdateModelConfig): a parameter set in
    auto_complete_config is neither served nor given to the model. If a release changes that, this fails,
    and triton_ort.model.autocomplete can set the parameter instead of warning."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    client.load_model("parameters_probe")
    try:
        served = client.get_model_config("parameters_probe")
        assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in served.get("parameters", {}), served
        # initialize() got none either (its log line reaches the log after the load returns)
        wait_for(lambda: "parameters probe: {}" in server.log(), 30, "the probe's initialize() line")
    finally:
        client.unload_model("parameters_probe")
