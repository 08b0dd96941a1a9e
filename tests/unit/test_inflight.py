"""Requests in flight (runtime/inflight.py): every request queued is answered exactly once, on every path,
and lanes run at the same time; then a real CPU ModelInstance keeping requests in flight answers as the
classic execute does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from tests.support.paths import DEMO_MAX_BATCH, demo_instance_config, demo_onnx
from triton_ort import InferenceError, InputError, ModelInstance
from triton_ort.errors import Cancelled, triton_code
from triton_ort.model.signature import Tensors
from triton_ort.runtime.gather import Result
from triton_ort.runtime.inflight import CANCEL_CHECK_AFTER_S, InflightScheduler, Pending
from triton_ort.runtime.metrics import InMemoryMetrics, InstanceMetrics


class Answers:
    """What each request was answered with, by request id; a second answer to one id is kept too."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[int, list[Result]] = {}
        self.done = threading.Condition(self.lock)

    def answer(self, request_id: int, copy: bool = False) -> Callable[[Result], None]:
        """The answer callback of one request; `copy`: keep copies of its outputs (host outputs live in
        the lane's buffers until its next run: model.py's answer copies them into Triton's tensor first)."""

        def send(result: Result) -> None:
            if copy and not isinstance(result, Exception):
                result = {name: array.copy() for name, array in result.items()}
            with self.lock:
                self.by_id.setdefault(request_id, []).append(result)
                self.done.notify_all()

        return send

    def wait_for(self, count: int, timeout_s: float = 5.0) -> None:
        with self.lock:
            assert self.done.wait_for(lambda: len(self.by_id) >= count, timeout_s), self.by_id

    def only(self, request_id: int) -> Result:
        answers = self.by_id[request_id]
        assert len(answers) == 1, answers
        return answers[0]


RunLog = list[tuple[int, float, float, int]]
"""(lane, start, end, requests) of each run"""


def _echo(seconds: float = 0.0, log: RunLog | None = None) -> Any:
    """A run that answers each request with its own `x` after `seconds`, logging (lane, start, end, n)."""

    def run(requests: Sequence[Tensors], lane: int) -> list[Result]:
        start = time.perf_counter()
        time.sleep(seconds)
        if log is not None:
            log.append((lane, start, time.perf_counter(), len(requests)))
        return [{"y": tensors["x"]} for tensors in requests]

    return run


def _pending(answers: Answers, request_id: int, rows: int = 1, **fields: Any) -> Pending:
    return Pending({"x": request_id}, answers.answer(request_id), rows=rows, **fields)


def test_every_request_is_answered_once_with_its_own_result_and_lanes_overlap() -> None:
    answers, log = Answers(), RunLog()
    scheduler = InflightScheduler(_echo(0.05, log), lanes=4, max_rows=0)
    for request_id in range(8):
        scheduler.submit(_pending(answers, request_id))
    answers.wait_for(8)
    assert scheduler.close()
    assert all(answers.only(i) == {"y": i} for i in range(8))
    assert all(n == 1 for *_, n in log)  # max_rows 0: a model that does not batch runs one at a time
    assert len({lane for lane, *_ in log}) > 1
    # runs of different lanes overlapped in time: 8 runs of 50 ms took well under 8 x 50 ms
    assert max(end for _, _, end, _ in log) - min(start for _, start, _, _ in log) < 0.3
    assert scheduler.in_flight == 0


def test_a_lane_gathers_what_is_queued_up_to_the_row_limit() -> None:
    answers, log = Answers(), RunLog()
    entered, gate = threading.Event(), threading.Event()

    def run(requests: Sequence[Tensors], lane: int) -> list[Result]:
        entered.set()
        gate.wait()  # the first run holds the only lane while the rest queue up
        results: list[Result] = _echo(0.0, log)(requests, lane)
        return results

    scheduler = InflightScheduler(run, lanes=1, max_rows=8)
    scheduler.submit(_pending(answers, 0, rows=3))
    assert entered.wait(5)
    for request_id in range(1, 5):
        scheduler.submit(_pending(answers, request_id, rows=3))
    gate.set()
    answers.wait_for(5)
    scheduler.close()
    assert [n for *_, n in log] == [1, 2, 2]  # 3 rows, then 6 + 6, each within 8 rows
    assert all(answers.only(i) == {"y": i} for i in range(5))


def test_an_executes_requests_wake_one_lane_which_gathers_them() -> None:
    """execute() and the lanes share one GIL, and every lane woken takes it: an execute's requests wake one
    lane, which gathers them, not one lane per request (the others woke to find nothing and slept again:
    a wake-up each, for nothing)."""
    wakes: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if (
            event == "return"
            and frame.f_code.co_name == "wait"
            and frame.f_code.co_filename == threading.__file__
        ):
            wakes.append(threading.current_thread().name)

    log: RunLog = []
    threading.setprofile(profile)  # the lanes, started from here on
    try:
        scheduler = InflightScheduler(_echo(log=log), lanes=4, max_rows=8)
    finally:
        threading.setprofile(None)
    time.sleep(0.1)  # every lane waits for work
    answers = Answers()
    scheduler.submit(*(_pending(answers, request_id) for request_id in range(4)))  # one execute's
    answers.wait_for(4)
    time.sleep(0.1)  # a lane woken for nothing would have woken by now
    lanes_woken = [name for name in wakes if name.startswith("triton_ort lane")]
    scheduler.close()  # which wakes every lane to end
    assert [requests for _, _, _, requests in log] == [4]
    assert len(lanes_woken) == 1, lanes_woken


def test_submit_waits_while_in_flight_is_at_capacity_so_the_rest_stay_in_tritons_queue() -> None:
    answers, gate = Answers(), threading.Event()

    def held(requests: Sequence[Tensors], lane: int) -> list[Result]:
        gate.wait()
        return [{"y": tensors["x"]} for tensors in requests]

    scheduler = InflightScheduler(held, lanes=1, max_rows=2)
    assert scheduler.capacity_rows == 4  # a batch on the lane and the next one queued
    for request_id in range(4):
        scheduler.submit(_pending(answers, request_id))
    fifth = threading.Thread(target=scheduler.submit, args=(_pending(answers, 4),))
    fifth.start()
    fifth.join(0.1)
    assert fifth.is_alive() and scheduler.in_flight == 4  # execute() would not have returned
    gate.set()
    fifth.join(5)
    assert not fifth.is_alive()
    answers.wait_for(5)
    scheduler.close()
    assert all(answers.only(i) == {"y": i} for i in range(5))
    assert scheduler.rows_in_flight == 0


def test_errors_are_answered_to_their_own_requests_and_the_lane_goes_on() -> None:
    answers = Answers()

    def run(requests: Sequence[Tensors], lane: int) -> list[Result]:
        if any(tensors["x"] == 2 for tensors in requests):
            raise RuntimeError("device lost")
        return [{"y": tensors["x"]} for tensors in requests]

    scheduler = InflightScheduler(run, lanes=1, max_rows=0)
    scheduler.submit(Pending(InputError("input 'x' is missing"), answers.answer(0)))
    scheduler.submit(_pending(answers, 1))
    scheduler.submit(_pending(answers, 2))
    scheduler.submit(_pending(answers, 3))
    answers.wait_for(4)
    scheduler.close()
    assert isinstance(answers.only(0), InputError)
    assert answers.only(1) == {"y": 1} and answers.only(3) == {"y": 3}
    failure = answers.only(2)
    assert isinstance(failure, InferenceError) and "RuntimeError: device lost" in str(failure)


def test_an_answer_that_cannot_be_sent_stops_nothing() -> None:
    answers = Answers()

    def broken(result: Result) -> None:
        raise RuntimeError("the client went away")

    scheduler = InflightScheduler(_echo(), lanes=1, max_rows=0)
    scheduler.submit(Pending({"x": 0}, broken))
    scheduler.submit(_pending(answers, 1))
    answers.wait_for(1)
    scheduler.close()
    assert answers.only(1) == {"y": 1}
    assert scheduler.in_flight == 0


def test_a_request_cancelled_while_queued_is_answered_cancelled_not_run() -> None:
    answers, log = Answers(), RunLog()
    waited = time.perf_counter() - 10 * CANCEL_CHECK_AFTER_S
    scheduler = InflightScheduler(_echo(0.0, log), lanes=1, max_rows=0)
    scheduler.submit(_pending(answers, 0, cancelled=lambda: True, queued_at=waited))
    scheduler.submit(_pending(answers, 1, cancelled=lambda: False, queued_at=waited))
    answers.wait_for(2)
    scheduler.close()
    cancelled = answers.only(0)
    assert isinstance(cancelled, Cancelled) and triton_code(cancelled) == "CANCELLED"
    assert answers.only(1) == {"y": 1}
    assert len(log) == 1


def test_close_answers_what_is_queued_and_later_requests_get_an_unloading_error() -> None:
    answers = Answers()
    scheduler = InflightScheduler(_echo(0.01), lanes=2, max_rows=0)
    for request_id in range(6):
        scheduler.submit(_pending(answers, request_id))
    assert scheduler.close()
    assert all(answers.only(i) == {"y": i} for i in range(6))  # queued before the unload: run
    scheduler.submit(_pending(answers, 6))
    late = answers.only(6)
    assert isinstance(late, InferenceError) and "unloading" in str(late)


def test_close_that_times_out_still_answers_every_queued_request() -> None:
    answers = Answers()
    entered, release = threading.Event(), threading.Event()

    def stuck(requests: Sequence[Tensors], lane: int) -> list[Result]:
        entered.set()
        release.wait()
        return [{"y": tensors["x"]} for tensors in requests]

    scheduler = InflightScheduler(stuck, lanes=1, max_rows=4)
    scheduler.submit(_pending(answers, 0))
    assert entered.wait(5)  # the lane holds request 0
    for request_id in (1, 2):
        scheduler.submit(_pending(answers, request_id))
    assert not scheduler.close(timeout_s=0.05)
    assert all(isinstance(answers.only(i), InferenceError) for i in (1, 2))
    release.set()
    answers.wait_for(3)
    assert answers.only(0) == {"y": 0}


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_cpu_instance_in_flight_answers_as_the_classic_execute(lanes: int) -> None:
    config = demo_instance_config(DEMO_MAX_BATCH, inflight_lanes=str(lanes))
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=3600.0)
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, numpy_on_cpu=True)
    assert len(instance.lanes) == lanes
    # what runtime/execute.py's InflightExecutor.on_lanes starts, and the gauge it gives the metrics
    scheduler = InflightScheduler(instance.infer, len(instance.lanes), instance.plan.max_batch_size)
    instance.start_metrics(metrics, in_flight=lambda: scheduler.in_flight)
    rng = np.random.default_rng(0)
    requests = [
        {"np_script_embeddings": rng.standard_normal((n, 2010), dtype=np.float32)} for n in (1, 3, 2, 5, 1, 4)
    ]
    expected = [{k: v.copy() for k, v in instance.infer([r])[0].items()} for r in requests]  # type: ignore[union-attr]
    answers = Answers()
    for request_id, request in enumerate(requests):
        rows = len(request["np_script_embeddings"])
        scheduler.submit(Pending(request, answers.answer(request_id, copy=True), rows=rows))
    answers.wait_for(len(requests))
    for request_id, want in enumerate(expected):
        got = answers.only(request_id)
        assert isinstance(got, dict), got
        np.testing.assert_allclose(got["np_logits"], want["np_logits"], rtol=1e-5, atol=1e-5)
    scheduler.close()
    instance.close()
    assert scheduler.in_flight == 0
    assert backend.value("triton_ort_requests_total") == 2 * len(requests)
    assert backend.value("triton_ort_runs_total") >= 1 + len(requests) // 5  # gathered where queued together
    assert backend.value("triton_ort_inflight_requests") == 0


def test_extra_lanes_go_when_the_server_cannot_answer_later() -> None:
    config = demo_instance_config(DEMO_MAX_BATCH, inflight_lanes="3")
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, numpy_on_cpu=True)
    assert len(instance.lanes) == 3
    instance.drop_extra_lanes("this release has no response sender for it")
    assert len(instance.lanes) == 1
