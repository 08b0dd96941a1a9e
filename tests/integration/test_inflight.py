"""Requests in flight (parameter inflight_lanes) on the real tritonserver. Where the release lets a model
that is not decoupled answer after execute returns (2.47 and later: the GPU test host's 2.51), concurrent
requests over HTTP and gRPC each get in-process ONNX Runtime's answer from the lanes, a bad request its own
error, requests their clients cancel leave none unanswered, and an unload with requests in flight leaves
none unanswered. Where it does not (2.41, CI's), the model serves classic and says why once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.metrics_port import scrape, series
from tests.support.paths import MODEL_REPOSITORY, SERVER_TOLERANCE, demo_onnx
from tests.support.repository import keep_in_flight
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.releases import server_release
from triton_ort.harness.repository import copy_model
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer, infer_inputs, make_client
from triton_ort.harness.waiting import wait_for

pytestmark = pytest.mark.integration

MODEL = "demo_inflight"
LANES = 2
IN_FLIGHT = f"keeping requests in flight on {LANES} lanes"
CLASSIC = "cannot answer a request after execute returns"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    demo_onnx()
    repository = tmp_path_factory.mktemp("inflight") / "repository"
    keep_in_flight(copy_model(MODEL_REPOSITORY / "demo", repository, MODEL), LANES)
    explicit = ["--model-control-mode=explicit", f"--load-model={MODEL}"]
    with LocalTritonServer(repository, extra_args=explicit) as server:
        yield server


def _answers_right(server: LocalTritonServer, count: int) -> None:
    rng = np.random.default_rng(7)
    sent = [rng.standard_normal((1 + i % 4, 2010)).astype(np.float32) for i in range(count)]

    def one(index: int) -> None:
        protocol = ("http", "grpc")[index % 2]
        url = server.http_url if protocol == "http" else server.grpc_url
        got, _ = infer(
            make_client(protocol, url), MODEL, {"np_script_embeddings": sent[index]}, ["np_logits"]
        )
        want = reference_outputs(demo_onnx(), {"np_script_embeddings": sent[index]})
        np.testing.assert_allclose(got["np_logits"], want["np_logits"], **SERVER_TOLERANCE)

    with ThreadPoolExecutor(16) as pool:
        for future in [pool.submit(one, index) for index in range(count)]:
            future.result()


def test_concurrent_requests_each_get_their_own_answer(served: LocalTritonServer) -> None:
    _answers_right(served, 64)
    log = served.log()
    if server_release(served.http_url).answers_through_response_sender:
        assert IN_FLIGHT in log and CLASSIC not in log
    else:  # one line, at the first execute, and the classic execute serves
        assert log.count(CLASSIC) == 1 and IN_FLIGHT not in log


def test_a_bad_request_gets_its_own_error_and_neighbours_their_answers(served: LocalTritonServer) -> None:
    client = make_client("http", served.http_url)
    with pytest.raises(InferenceServerException, match="np_script_embeddings"):
        infer(client, MODEL, {"np_script_embeddings": np.zeros((1, 7), np.float32)}, ["np_logits"])
    _answers_right(served, 8)


def test_requests_their_clients_cancel_leave_none_unanswered(served: LocalTritonServer) -> None:
    """A burst over gRPC whose every other request its client cancels at once: the requests kept get their
    answers; each cancelled one ends CANCELLED, or answered right where it ran first; and every request
    the model took was answered exactly once (a request it never answered would stay in the in-flight gauge
    and hold the model loaded: the gauge returns to 0, and the model unloads and loads again). Which layer
    notices a cancellation depends on timing: the client, Triton's queue, or a lane (runtime/inflight.py,
    for a request waiting in our queue: 0 to 16 of the 24 per run on the 2-core CPU machine)."""
    client = grpcclient.InferenceServerClient(served.grpc_url)
    x = np.ones((64, 2010), np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    count = 48
    outcomes: dict[int, Any] = {}
    all_back = threading.Event()

    def record(index: int) -> Callable[[Any, Any], None]:
        def callback(result: Any, error: Any) -> None:
            outcomes[index] = error if error is not None else result.as_numpy("np_logits")
            if len(outcomes) == count:
                all_back.set()

        return callback

    inputs = infer_inputs(grpcclient, {"np_script_embeddings": x})
    calls = [client.async_infer(MODEL, inputs, record(index)) for index in range(count)]
    time.sleep(0.02)  # some wait in our queue by now
    for call in calls[1::2]:
        call.cancel()
    assert all_back.wait(60), f"{count - len(outcomes)} request(s) never came back"
    for index, got in outcomes.items():
        if index % 2 == 1 and isinstance(got, InferenceServerException):
            assert "CANCELLED" in str(got.status()), got
        else:
            assert not isinstance(got, Exception), (index, got)
            np.testing.assert_allclose(got, want, **SERVER_TOLERANCE)
    if server_release(served.http_url).answers_through_response_sender:
        wait_for(lambda: _in_flight(served) == 0, 10, "no request left in flight")
    http = make_client("http", served.http_url)
    http.unload_model(MODEL)
    wait_for(lambda: _unloaded(http), 30, f"{MODEL} unloaded")
    http.load_model(MODEL)
    _answers_right(served, 8)


def _in_flight(server: LocalTritonServer) -> float | None:
    """The model's in-flight gauge, summed over its instances; None before it is first sent."""
    values = series(scrape(server), "triton_ort_inflight_requests", model=MODEL)
    return sum(values.values()) if values else None


def _unloaded(client: Any) -> bool:
    """The unload has finished. Triton's unload call returns at once, and the model leaves READY for
    UNLOADING then; it stays UNLOADING while a request it took is unanswered."""
    index = client.get_model_repository_index()
    return any(m["name"] == MODEL and m.get("state") == "UNAVAILABLE" for m in index)


def test_an_unload_with_requests_in_flight_leaves_none_unanswered(served: LocalTritonServer) -> None:
    client = make_client("http", served.http_url)
    x = np.ones((64, 2010), np.float32)

    def one(_: int) -> Any:
        try:
            return infer(
                make_client("grpc", served.grpc_url), MODEL, {"np_script_embeddings": x}, ["np_logits"]
            )
        except InferenceServerException as error:
            return error

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(one, index) for index in range(64)]
        client.unload_model(MODEL)
        outcomes = [future.result(timeout=120) for future in futures]  # none may hang
    answered = [o for o in outcomes if not isinstance(o, Exception)]
    assert answered, outcomes[:3]  # requests taken before the unload were answered
    for outputs, _ in answered:
        assert outputs["np_logits"].shape == (64, 2)
    client.load_model(MODEL)
    _answers_right(served, 8)
