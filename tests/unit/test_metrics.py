"""Instance metrics are fed from the runner's totals once per execute, through the small backend interface."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import torch

from tests.support.paths import demo_instance_config, demo_onnx
from triton_ort import ModelInstance
from triton_ort.metrics import InMemoryMetrics, InstanceMetrics, TritonMetricFamilies, triton_instance_metrics
from triton_ort.stats import RunnerStats

LABELS = {"model": "demo", "version": "1", "instance": "demo_0"}


def test_one_execute_adds_what_the_runner_gained() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0")
    metrics.loaded(RunnerStats(ort_runs=1, ort_run_seconds=0.5), cpu_fallback=False)  # warm-up: not counted
    stats = RunnerStats(ort_runs=3, ort_run_seconds=0.75, host_to_device_copies=4, host_output_runs=1)
    metrics.record_execute(stats, requests=5, rows=40, on_device=True)
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
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0")
    metrics.loaded(RunnerStats(), cpu_fallback=True)
    before = backend.calls
    metrics.record_execute(
        RunnerStats(ort_runs=1, ort_run_seconds=0.001), requests=1, rows=1, on_device=False
    )  # the first execute is sent at once
    # executes, requests, rows, runs, run seconds: nothing for copies, placement (CPU) or arena shrinks
    assert backend.calls - before == 5
    assert backend.value("triton_ort_cpu_fallback") == 1
    assert backend.value("triton_ort_output_placement_total") == 0


def test_cpu_instance_counts_executes_requests_rows_and_runs() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0")
    config = demo_instance_config(64, intra_op_thread_count="1")
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0, metrics=metrics)
    requests = [{"np_script_embeddings": torch.rand(rows, 2010)} for rows in (3, 5)]
    instance.infer(requests)
    instance.infer(requests[:1])
    instance.close()  # sends what waits for the flush interval
    assert backend.value("triton_ort_executes_total") == 2  # the warm-up run is not an execute
    assert backend.value("triton_ort_requests_total") == 3
    assert backend.value("triton_ort_rows_total") == 11
    assert backend.value("triton_ort_runs_total") == 2  # the two requests were gathered into one run
    assert backend.value("triton_ort_run_seconds_total") > 0


def test_counts_within_the_flush_interval_wait_and_are_sent_together() -> None:
    backend = InMemoryMetrics()
    now = [100.0]
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=1.0, clock=lambda: now[0])
    metrics.loaded(RunnerStats(), cpu_fallback=False)
    metrics.record_execute(RunnerStats(ort_runs=1), requests=1, rows=2, on_device=False)
    sent = backend.calls
    assert backend.value("triton_ort_requests_total", **LABELS) == 1
    now[0] += 0.4
    metrics.record_execute(RunnerStats(ort_runs=2), requests=3, rows=6, on_device=False)
    now[0] += 0.4
    metrics.record_execute(RunnerStats(ort_runs=3), requests=1, rows=1, on_device=False)
    assert backend.calls == sent  # within the interval: nothing sent, no round trip
    assert backend.value("triton_ort_requests_total", **LABELS) == 1
    now[0] += 0.3
    metrics.record_execute(RunnerStats(ort_runs=4), requests=2, rows=2, on_device=False)
    # one increment per counter carries the three executes' sums
    assert backend.calls - sent == 4  # executes, requests, rows, runs
    assert backend.value("triton_ort_executes_total", **LABELS) == 4
    assert backend.value("triton_ort_requests_total", **LABELS) == 7
    assert backend.value("triton_ort_rows_total", **LABELS) == 11
    assert backend.value("triton_ort_runs_total", **LABELS) == 4


def test_unload_sends_what_is_still_waiting() -> None:
    backend = InMemoryMetrics()
    metrics = InstanceMetrics(backend, "demo", "1", "demo_0", flush_interval_s=3600.0)
    metrics.loaded(RunnerStats(), cpu_fallback=False)
    metrics.record_execute(RunnerStats(ort_runs=1), requests=1, rows=1, on_device=False)
    metrics.record_execute(RunnerStats(ort_runs=2), requests=2, rows=5, on_device=False)
    assert backend.value("triton_ort_requests_total", **LABELS) == 1
    metrics.flush()  # ModelInstance.close() at finalize
    assert backend.value("triton_ort_requests_total", **LABELS) == 3
    assert backend.value("triton_ort_rows_total", **LABELS) == 6


class _FakeFamily:
    COUNTER, GAUGE = "counter", "gauge"
    created: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.created.append((name, kind))
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
