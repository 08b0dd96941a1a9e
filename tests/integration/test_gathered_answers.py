"""Answers that gathering must not change, from a real tritonserver over HTTP and gRPC with concurrent
requests that the dynamic batcher puts into shared executes, each compared with in-process ONNX Runtime on
that request alone:

- `overridable`: y = x * scale + offset, with `scale` (one value per request) and `offset` (batched)
  initializers listed as graph inputs, defaults that a request may override. Auto-complete serves them as
  optional inputs; requests that send them and requests that do not share executes.
- `quantized`: an MLP through onnxruntime.quantization.quantize_dynamic, whose DynamicQuantizeLinear
  computes one scale over all the rows of a run: gathered into one run, a request's answer would depend on
  its neighbours. Its requests run one per ORT run, and the log says so.

Both models are built here (tests/support/graphs.py) and served with the backend line, max_batch_size and a
queue delay that lets the concurrent requests meet in one execute."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.paths import SERVER_TOLERANCE
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.repository import write_config
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import PROTOCOLS, infer, make_client, model_config
from triton_ort.runtime.stats import ExecuteStats

pytestmark = pytest.mark.integration

QUEUE_DELAY_US = 200_000
"""Long enough for every concurrent request of a test to reach the model's queue before an execute."""

MODELS: dict[str, Callable[[Path], Path]] = {
    "overridable": graphs.overridable,
    "quantized": graphs.quantized_mlp,
}


def _config(name: str) -> model_config_pb2.ModelConfig:
    """The backend line and max_batch_size (auto-complete reads the rest from the ONNX file), one instance,
    and a queue delay."""
    config = model_config_pb2.ModelConfig(name=name, backend="onnxruntime_zerocopy", max_batch_size=8)
    config.instance_group.add(count=1)
    config.dynamic_batching.max_queue_delay_microseconds = QUEUE_DELAY_US
    return config


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTritonServer, dict[str, Path]]]:
    repository = tmp_path_factory.mktemp("gathered") / "repository"
    files = {}
    for name, build in MODELS.items():
        files[name] = build(repository / name / "1" / "model.onnx")
        write_config(repository / name, _config(name))
    # The library's per-execute debug lines: how many requests each execute had, and how many ORT runs.
    with LocalTritonServer(repository, log_verbose=1, env={"TRITON_ORT_LOG_LEVEL": "DEBUG"}) as server:
        yield server, files


Request = tuple[dict[str, NDArray[Any]], dict[str, NDArray[Any]]]
"""(the request as sent, the same request as in-process ORT takes it)"""


def _answers_alone(
    server: LocalTritonServer, model: str, onnx_path: Path, requests: list[Request]
) -> list[tuple[int, int]]:
    """Every request over both protocols, all at once; each answer must be in-process ORT's for that
    request alone. Returns (requests, ORT runs) of each execute they made (the module's tests run one at
    a time, so the log's new records are theirs)."""
    names = [
        str(entry["name"]) for entry in model_config(make_client("http", server.http_url), model)["output"]
    ]
    seen = len(ExecuteStats.from_log(server.log()))

    def one(protocol: str, sent: dict[str, NDArray[Any]], feeds: dict[str, NDArray[Any]]) -> None:
        url = server.http_url if protocol == "http" else server.grpc_url
        got, _ = infer(make_client(protocol, url), model, sent, names)
        want = reference_outputs(onnx_path, feeds)
        for name in names:
            np.testing.assert_allclose(
                got[name], want[name], err_msg=f"{name} for {sorted(sent)}", **SERVER_TOLERANCE
            )

    calls = [partial(one, protocol, sent, feeds) for protocol in PROTOCOLS for sent, feeds in requests]
    with ThreadPoolExecutor(len(calls)) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()
    executes = [(record.requests, record.ort_runs) for record in ExecuteStats.from_log(server.log())[seen:]]
    assert sum(requests for requests, _ in executes) == len(calls), executes
    return executes


def _scaled(rng: np.random.Generator, index: int, value: float | None, offset: bool = False) -> Request:
    """x of 1 or 2 rows; `scale` in each row of Triton's batch axis alike (ORT takes the one value), or
    left out (None: the default); `offset` (batched) when asked."""
    rows = 1 + index % 2
    x = rng.standard_normal((rows, 4)).astype(np.float32)
    sent: dict[str, NDArray[Any]] = {"x": x}
    feeds: dict[str, NDArray[Any]] = {"x": x}
    if value is not None:
        sent["scale"] = np.full((rows, 1), value, np.float32)
        feeds["scale"] = np.array([value], np.float32)
    if offset:
        sent["offset"] = feeds["offset"] = rng.standard_normal((rows, 4)).astype(np.float32)
    return sent, feeds


def test_the_overridable_inputs_are_optional_inputs_of_the_served_config(served: Any) -> None:
    server, _ = served
    config = model_config(make_client("http", server.http_url), "overridable")
    inputs = {entry["name"]: entry for entry in config["input"]}
    assert [int(d) for d in inputs["scale"]["dims"]] == [1] and inputs["scale"]["optional"] is True
    assert [int(d) for d in inputs["offset"]["dims"]] == [4] and inputs["offset"]["optional"] is True
    assert inputs["x"].get("optional", False) is False


def test_requests_with_and_without_overridable_inputs_each_get_onnx_runtimes_answer(served: Any) -> None:
    """Sent together: requests that leave the inputs out (the file's defaults), that send `scale` of two
    values, and a few that also send `offset` (batched). Triton's dynamic batcher gives one execute only
    requests that send the same inputs (core's RequiredEqualInputs, for a model with optional inputs)."""
    server, files = served
    rng = np.random.default_rng(29)
    scales = (None, None, -0.5, 3.0)
    requests = [_scaled(rng, index, scales[index % 4], offset=index in (3, 10)) for index in range(16)]
    _answers_alone(server, "overridable", files["overridable"], requests)


def test_requests_of_different_values_of_a_one_value_input_share_executes_but_not_runs(served: Any) -> None:
    """All send `scale`, of two values: Triton gathers them into executes, and each execute runs once per
    value, so every answer is in-process ORT's for its own value."""
    server, files = served
    rng = np.random.default_rng(30)
    requests = [_scaled(rng, index, (3.0, -0.5)[index % 2]) for index in range(16)]
    executes = _answers_alone(server, "overridable", files["overridable"], requests)
    assert any(requests > runs for requests, runs in executes), f"nothing was gathered: {executes}"
    assert any(runs > 1 for _, runs in executes), f"no execute held both values: {executes}"


def test_a_dynamically_quantized_model_answers_each_request_as_if_sent_alone(served: Any) -> None:
    """20 concurrent requests of different rows (and magnitudes: a shared quantization scale would
    coarsen the small ones), each answered as in-process ORT answers it alone."""
    server, files = served
    rng = np.random.default_rng(2)
    rows = [
        (rng.standard_normal((1, graphs.MLP_FEATURES)) * (1 + 5 * i)).astype(np.float32) for i in range(10)
    ]
    requests = [({"x": x}, {"x": x}) for x in rows]  # ten per protocol: 20 at once
    executes = _answers_alone(server, "quantized", files["quantized"], requests)
    assert any(requests > 1 for requests, _ in executes), f"Triton gathered nothing: {executes}"
    assert all(requests == runs for requests, runs in executes), executes  # one ORT run per request
    log = server.log()
    assert (
        "requests run one per ORT run, not gathered: node 'x_QuantizeLinear' (DynamicQuantizeLinear)" in log
    )
    assert log.count("requests run one per ORT run") == 1  # said once, at load
