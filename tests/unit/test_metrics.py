"""Instance metrics are fed from the runner's totals, counted per execute and sent by a sender thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import torch

from tests.support.paths import demo_instance_config, demo_onnx
from triton_ort import ModelInstance
from triton_ort.runtime.metrics import (
    InMemoryMetrics,
    InstanceMetrics,
    TritonMetricFamilies,
    triton_instance_metrics,
)
from triton_ort.runtime.stats import RunnerStats

LABELS = {"model": "demo", "version": "1", "instance": "demo_0"}


def _wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_one_execute_adds_what_the_runner_gained() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0")
    metrics.loaded(RunnerStats(ort_runs=1, ort_run_seconds=0.5), cpu_fallback=False)  # warm-up: not counted
    stats = RunnerStats(ort_runs=3, ort_run_seconds=0.75, host_to_device_copies=4, host_output_runs=1)
    metrics.record_execute(stats, requests=5, rows=40, on_device=True)
    metrics.close()
    assert backend.value("triton_ort_executes_total", **LABELS) == 1
    assert backend.value("triton_ort_requests_total", **LABELS) == 5
    assert backend.value("triton_ort_rows_total", **LABELS) == 40
    assert backend.value("triton_ort_runs_total", **LABELS) == 2
    assert backend.value("triton_ort_run_seconds_total", **LABELS) == 0.25
    assert backend.value("triton_ort_host_to_device_copies_total", **LABELS) == 4
    assert backend.value("triton_ort_output_placement_total", placement="host") == 1
    assert backend.value("triton_ort_output_placement_total", placement="device") == 1
    assert backend.value("triton_ort_cpu_fallback", **LABELS) == 0


def test_unchanged_counters_are_not_sent() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=3600.0)
    metrics.loaded(RunnerStats(), cpu_fallback=True)
    before = backend.calls
    metrics.record_execute(
        RunnerStats(ort_runs=1, ort_run_seconds=0.001), requests=1, rows=1, on_device=False
    )
    metrics.flush()
    # executes, requests, rows, runs, run seconds: nothing for copies, placement (CPU) or arena shrinks
    assert backend.calls - before == 5
    assert backend.value("triton_ort_cpu_fallback") == 1
    assert backend.value("triton_ort_output_placement_total") == 0
    metrics.close()


def test_cpu_instance_counts_executes_requests_rows_and_runs() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0")
    config = demo_instance_config(64, intra_op_thread_count="1")
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, metrics=metrics)
    requests = [{"np_script_embeddings": torch.rand(rows, 2010)} for rows in (3, 5)]
    instance.infer(requests)
    instance.infer(requests[:1])
    instance.close()  # stops the sender and sends what it has not sent yet
    assert backend.value("triton_ort_executes_total") == 2  # the warm-up run is not an execute
    assert backend.value("triton_ort_requests_total") == 3
    assert backend.value("triton_ort_rows_total") == 11
    assert backend.value("triton_ort_runs_total") == 2  # the two requests were gathered into one run
    assert backend.value("triton_ort_run_seconds_total") > 0


def test_a_burst_is_sent_without_a_further_execute() -> None:
    """The counts of the last executes reach the server by themselves, within the interval: a scrape after a
    burst sees every execute, with no request after it."""
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=0.05)
    metrics.loaded(RunnerStats(), cpu_fallback=False)
    for runs in range(1, 128):
        with metrics.lock:  # as ModelInstance.infer holds it
            metrics.record_execute(RunnerStats(ort_runs=runs), requests=2, rows=3, on_device=False)
    assert _wait_for(lambda: backend.value("triton_ort_executes_total", **LABELS) == 127)
    assert backend.value("triton_ort_requests_total", **LABELS) == 254
    assert backend.value("triton_ort_rows_total", **LABELS) == 381
    assert backend.value("triton_ort_runs_total", **LABELS) == 127
    metrics.close()


def test_executes_within_the_interval_are_sent_together() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=0.5)
    metrics.loaded(RunnerStats(), cpu_fallback=False)
    sent = backend.calls
    for runs in (1, 2, 3):
        metrics.record_execute(RunnerStats(ort_runs=runs), requests=1, rows=2, on_device=False)
    assert backend.calls == sent  # an execute makes no round trip
    assert _wait_for(lambda: backend.value("triton_ort_executes_total", **LABELS) == 3)
    assert backend.calls - sent == 4  # one increment each: executes, requests, rows, runs
    assert backend.value("triton_ort_rows_total", **LABELS) == 6
    metrics.close()


def test_close_stops_the_sender_and_sends_what_is_still_waiting() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=3600.0)
    metrics.loaded(RunnerStats(), cpu_fallback=False)
    metrics.record_execute(RunnerStats(ort_runs=1), requests=1, rows=1, on_device=False)
    metrics.record_execute(RunnerStats(ort_runs=2), requests=2, rows=5, on_device=False)
    assert backend.value("triton_ort_requests_total", **LABELS) == 0
    metrics.close()  # ModelInstance.close() at finalize
    assert backend.value("triton_ort_requests_total", **LABELS) == 3
    assert backend.value("triton_ort_rows_total", **LABELS) == 6
    assert not any(t.name == "triton_ort metrics" for t in threading.enumerate())


def test_the_sender_reads_the_runner_totals_between_executes() -> None:
    """While an execute holds the lock its runner's totals change; a flush waits for it to end."""
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=3600.0)
    stats = RunnerStats()
    metrics.loaded(stats, cpu_fallback=False)
    metrics.record_execute(stats, requests=1, rows=1, on_device=True)
    with metrics.lock:  # an execute in the middle of a run: runs counted, placement not yet
        stats.ort_runs += 1
        flushing = threading.Thread(target=metrics.flush)
        flushing.start()
        time.sleep(0.05)
        assert backend.value("triton_ort_executes_total", **LABELS) == 0
        stats.host_output_runs += 1
    flushing.join()
    assert backend.value("triton_ort_output_placement_total", placement="host") == 1
    assert backend.value("triton_ort_output_placement_total", placement="device") == 0
    metrics.close()


class _FakeFamily:
    COUNTER, GAUGE = "counter", "gauge"
    created: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.created.append((name, kind))
        self.name = name
        self.labels: list[dict[str, str]] = []

    def Metric(self, labels: dict[str, str]) -> SimpleNamespace:
        self.labels.append(labels)
        return SimpleNamespace(increment=lambda value: None, set=lambda value: None)


def test_triton_backend_makes_one_family_per_name_and_a_series_per_label_set() -> None:
    _FakeFamily.created = []
    backend = TritonMetricFamilies(SimpleNamespace(MetricFamily=_FakeFamily))
    InstanceMetrics(backend, "demo", "1", "demo_0")
    names = [name for name, _ in _FakeFamily.created]
    assert len(names) == len(set(names))  # output_placement's two series share one family
    assert ("triton_ort_cpu_fallback", "gauge") in _FakeFamily.created
    assert ("triton_ort_runs_total", "counter") in _FakeFamily.created


class _RefusingFamily(_FakeFamily):
    def __init__(self, name: str, description: str, kind: str) -> None:
        raise RuntimeError("metrics are disabled")


def test_a_server_without_metrics_serves_on_without_them() -> None:
    assert (
        triton_instance_metrics(SimpleNamespace(MetricFamily=_RefusingFamily), "demo", "1", "demo_0") is None
    )


class _FailingCounter:
    def increment(self, value: float) -> None:
        raise RuntimeError("the server is shutting down")

    def set(self, value: float) -> None:
        pass


class _FailingSends(InMemoryMetrics):
    def counter(self, name: str, description: str, labels: Any) -> Any:
        return _FailingCounter()


def test_a_failed_metrics_send_does_not_fail_the_answers() -> None:
    metrics = InstanceMetrics(_FailingSends(), "demo", "1", "demo_0")
    config = demo_instance_config(64, intra_op_thread_count="1")
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, metrics=metrics)
    (result,) = instance.infer([{"np_script_embeddings": torch.rand(2, 2010)}])
    assert isinstance(result, dict) and result["np_logits"].shape == (2, 2)
    instance.close()  # the last send fails too: logged, and the unload goes on


def test_every_series_names_the_stub_process_that_counts_it() -> None:
    """Two stubs of one model, version and instance (a reload beside the serving version) must never share
    a label set: Triton frees a shared series when either stub deletes its metric (metrics.py)."""
    _FakeFamily.created = []
    families: list[_FakeFamily] = []

    def family(name: str, description: str, kind: str) -> _FakeFamily:
        families.append(_FakeFamily(name, description, kind))
        return families[-1]

    family.COUNTER, family.GAUGE = "counter", "gauge"  # type: ignore[attr-defined]
    pb_utils = SimpleNamespace(MetricFamily=family)
    serving = triton_instance_metrics(pb_utils, "demo", "1", "demo_0")
    assert serving is not None and serving.labels["pid"] == str(os.getpid())
    InstanceMetrics(TritonMetricFamilies(pb_utils), "demo", "1", "demo_0", pid=os.getpid() + 1)
    series = [(f.name, tuple(sorted(labels.items()))) for f in families for labels in f.labels]
    assert all(dict(labels)["pid"] for _, labels in series)
    assert len(series) == len(set(series)), "two stubs' metrics share a series"


class _BlockedCounter:
    """A send the server never answers (a round trip to a stalled server process)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def increment(self, value: float) -> None:
        self.release.wait()

    def set(self, value: float) -> None:
        pass


def test_a_blocked_metrics_send_blocks_neither_executes_nor_the_unload() -> None:
    release = threading.Event()

    class Blocked(InMemoryMetrics):
        def counter(self, name: str, description: str, labels: Any) -> Any:
            return _BlockedCounter(release)

    metrics = InstanceMetrics(Blocked(), "demo", "1", "demo_0", flush_interval_s=0.01)
    config = demo_instance_config(64, intra_op_thread_count="1")
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, metrics=metrics)
    try:
        x = {"np_script_embeddings": torch.rand(2, 2010)}
        instance.infer([x])
        time.sleep(0.1)  # the sender is now inside its blocked send
        started = time.monotonic()
        for _ in range(3):
            (result,) = instance.infer([x])
            assert isinstance(result, dict)
        assert time.monotonic() - started < 2.0, "executes waited for the blocked send"
        started = time.monotonic()
        assert metrics.close(timeout_s=0.5) is False  # the counts held by the blocked send are lost
        assert time.monotonic() - started < 1.5, "the unload waited for the blocked send"
    finally:
        release.set()
    assert _wait_for(lambda: not any(t.name == "triton_ort metrics" for t in threading.enumerate()))


def test_close_without_a_started_sender_returns_at_once() -> None:
    metrics = InstanceMetrics(InMemoryMetrics(), "demo", "1", "demo_0")
    assert metrics.close(timeout_s=0.0) is True
