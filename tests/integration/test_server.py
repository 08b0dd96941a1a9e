"""The real tritonserver (2.41 from nvidia-pytriton) serving model.py, through tritonclient and raw JSON."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tests.support.paths import SERVER_TOLERANCE, demo_onnx
from tests.support.repository import build_mismatch_repository
from triton_ort.harness.processes import stub_processes
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer, model_metadata, statistics
from triton_ort.runtime.stats import ExecuteStats

pytestmark = pytest.mark.integration


def clients(server: LocalTritonServer) -> list[object]:
    return [
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ]


def test_demo_over_http_and_grpc_matches_in_process_ort(server: LocalTritonServer) -> None:
    x = np.random.default_rng(1).standard_normal((7, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    for client in clients(server):
        got, _ = infer(client, "demo", {"np_script_embeddings": x}, ["np_logits"])
        np.testing.assert_allclose(got["np_logits"], want, **SERVER_TOLERANCE)


def test_raw_kserve_v2_json(server: LocalTritonServer) -> None:
    x = np.linspace(-1, 1, 2 * 2010, dtype=np.float32).reshape(2, 2010)
    body = {
        "inputs": [
            {
                "name": "np_script_embeddings",
                "shape": [2, 2010],
                "datatype": "FP32",
                "data": x.ravel().tolist(),
            }
        ],
        "outputs": [{"name": "np_logits"}],
    }
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/demo/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer = json.load(reply)
    output = answer["outputs"][0]
    assert output["name"] == "np_logits" and output["datatype"] == "FP32" and output["shape"] == [2, 2]
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    np.testing.assert_allclose(
        np.array(output["data"], dtype=np.float32).reshape(2, 2), want, **SERVER_TOLERANCE
    )


def test_metadata_matches_the_onnx_file(server: LocalTritonServer) -> None:
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    for client in clients(server):
        metadata = model_metadata(client, "demo")
        assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in metadata["inputs"]] == [
            (i.name, "FP32", [-1, *i.shape[1:]]) for i in session.get_inputs()
        ]
        assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in metadata["outputs"]] == [
            (o.name, "FP32", [-1, *o.shape[1:]]) for o in session.get_outputs()
        ]


def test_fp16_int64_bool_inputs_and_outputs(server: LocalTritonServer) -> None:
    rng = np.random.default_rng(2)
    inputs: dict[str, NDArray[Any]] = {
        "a": rng.standard_normal((3, 3)).astype(np.float16),
        "b": rng.integers(-1000, 1000, (3, 4)).astype(np.int64),
        "c": rng.integers(0, 2, (3, 2)).astype(bool),
    }
    for client in clients(server):
        got, _ = infer(client, "multi_io", inputs, ["a_twice", "b_sum", "c_not"])
        np.testing.assert_array_equal(got["a_twice"], inputs["a"] + inputs["a"])
        np.testing.assert_array_equal(got["b_sum"], inputs["b"].sum(axis=1, keepdims=True))
        np.testing.assert_array_equal(got["c_not"], ~inputs["c"])
        assert got["a_twice"].dtype == np.float16 and got["c_not"].dtype == bool


def _gather_request(client: httpclient.InferenceServerClient, x: NDArray[Any], idx: NDArray[Any]) -> object:
    try:
        got, _ = infer(client, "gather", {"x": x, "idx": idx}, ["out"])
        return got["out"]
    except InferenceServerException as error:
        return error


def test_concurrent_requests_are_gathered_and_a_bad_one_fails_alone(server: LocalTritonServer) -> None:
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(8)]
    idxs = [np.array([[i % 4]], dtype=np.int64) for i in range(8)]
    idxs[5] = np.array([[7]], dtype=np.int64)  # out of range: fails inside ORT, for this request only
    before = statistics(server.http_url, "gather")
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: _gather_request(client, xs[i], idxs[i]), range(8)))
    after = statistics(server.http_url, "gather")
    for i, result in enumerate(results):
        if i == 5:
            assert isinstance(result, InferenceServerException)
            assert "could not compute this request" in str(result) and "GatherElements" in str(result)
        else:
            assert isinstance(result, np.ndarray), result
            np.testing.assert_array_equal(result, xs[i][:, idxs[i][0, 0]].reshape(1, 1))
    executions = after.executions - before.executions
    assert executions < 8, f"8 concurrent requests took {executions} executions: nothing was gathered"
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()
    # The library's debug records: several requests reached one execute. (Their joint run fails when the
    # bad request is among them, and they are then run one by one; tests/unit/test_gather.py shows the
    # joint run itself.)
    executes = ExecuteStats.from_log(server.log())
    assert any(e.requests > 1 for e in executes), executes


def test_config_that_disagrees_with_the_onnx_file_fails_the_load_with_every_difference(
    tmp_path: Path,
) -> None:
    repository = build_mismatch_repository(tmp_path)
    with LocalTritonServer(repository, extra_args=["--model-control-mode=explicit"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("mismatch")
        message = str(caught.value)
        assert "config.pbtxt does not match the ONNX file" in message
        assert "axis 1 is 2000 in config.pbtxt but 2010 in the ONNX file" in message
        assert "output 'np_logits': config says FP16, the ONNX file says FP32" in message
        assert client.is_server_live()


def test_a_cpu_instance_without_hooks_serves_without_torch_in_its_stub(server: LocalTritonServer) -> None:
    """`gather` is KIND_CPU on every host: its stub reads Triton's tensors as numpy and never imports torch
    (triton_ort.runtime.arrays), so torch's libraries are not mapped into it, after an answered request
    too."""
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got, _ = infer(client, "gather", {"x": x, "idx": np.array([[1], [3]], np.int64)}, ["out"])
    np.testing.assert_array_equal(got["out"], [[1.0], [7.0]])
    assert server.process is not None
    stubs = [pid for pid, model_py in stub_processes(server.process.pid).items() if "/gather/" in model_py]
    assert len(stubs) == 1, stubs
    mapped = {Path(region.path).name for region in psutil.Process(stubs[0]).memory_maps()}
    assert "onnxruntime_pybind11_state" in " ".join(mapped), "ONNX Runtime is not mapped: is this our stub?"
    assert not [name for name in mapped if name.startswith(("libtorch", "libc10"))], sorted(mapped)
