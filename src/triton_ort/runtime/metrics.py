"""Custom Prometheus metrics of a model instance, on Triton's metrics port (docs/metrics.md).

The library stays importable without Triton: it talks to a small `MetricsBackend` interface. model.py backs
it with the python backend's `pb_utils.MetricFamily` (`TritonMetricFamilies`); unit tests use
`InMemoryMetrics`. Values come from the runner's running totals (`RunnerStats`), once per execute: the
difference since the last execute is added, so no hot-path line is instrumented.

In the python backend every Metric.increment() is a blocking round trip from the stub to the server process
(python_backend src/metric.cc, SendIncrementRequest): measured on CPU, sending the five to seven changed
counters after every execute cost a median 155 µs, twice the demo model's own run. So an execute only adds
its requests and rows to three local numbers and wakes a sender thread; the sender waits
`flush_interval_s` (0.1 s) for more executes to join, then sends the counters that changed (with what the
runner's totals gained meanwhile), one increment each, and at unload the instance sends the rest. A scrape
therefore sees every execute about 0.1 s after it, whether or not traffic goes on. Sending from a thread of
our own is what the stub allows: Stub::SendMessage serialises its callers with a mutex
(stub_to_parent_message_mu_, 23.12 and 24.10 alike), and the round trip holds the GIL, so it delays the
execute thread at most once per interval, never per execute. The runner's totals change while an execute
runs; `ModelInstance.infer` holds `InstanceMetrics.lock` meanwhile, so the sender reads them between
executes (a torn read could count a run as on the device and then take it back).

Every series also carries the label `pid`, the stub process that counts it, because Triton must never see two
stubs' metrics with one label set. Two processes that create a metric of the same name and labels get one
prometheus series, but Triton core counts each MetricFamily's holders apart (core src/metric_family.cc,
MetricFamily::Add/Remove: prom_metric_ref_cnt_ is a member of each family object, 23.12 to 24.10): the first
to delete its metric frees the series while the other still writes to it. A load that fails while the
previous version serves (a half-copied model.onnx), or a reload of a serving version, runs a second stub
beside the first with the same model, version and instance: its metrics, deleted with it, freed the serving
stub's series, whose next increment wrote freed memory in tritonserver; every later model load then hung
(measured, 2.41: also with a plain python model that keeps one counter). With the stub's pid in the labels
each series has one holder, and goes with it.

Unload is bounded: `close()` lets the sender send the rest and waits `CLOSE_TIMEOUT_S` for it; a send that
blocks (a round trip the server does not answer) loses those counts, never the unload.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .stats import RunnerStats, total_stats

LOGGER = logging.getLogger(__name__)

PREFIX = "triton_ort_"
# How long the sender waits after an execute for more to join before it sends (see the module docstring):
# a scrape sees an execute about this long after it.
FLUSH_INTERVAL_S = 0.1
# How long an unload waits for the sender's last send (a few round trips, well under a millisecond each).
CLOSE_TIMEOUT_S = 5.0


class Counter(Protocol):
    def increment(self, value: float) -> None: ...


class Gauge(Protocol):
    def set(self, value: float) -> None: ...


class MetricsBackend(Protocol):
    """Creates labelled metrics; the same name with other labels is another series of one family."""

    def counter(self, name: str, description: str, labels: Mapping[str, str]) -> Counter: ...

    def gauge(self, name: str, description: str, labels: Mapping[str, str]) -> Gauge: ...


@dataclass
class _Value:
    value: float = 0.0

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value


@dataclass
class InMemoryMetrics:
    """A MetricsBackend that keeps values in a dict, for tests and for running without Triton."""

    series: dict[tuple[str, tuple[tuple[str, str], ...]], _Value] = field(default_factory=dict)
    calls: int = 0
    """Updates made (increment or set): what a Triton backend would send to the server."""

    def _metric(self, name: str, labels: Mapping[str, str]) -> _Value:
        return self.series.setdefault((name, tuple(sorted(labels.items()))), _Value())

    def counter(self, name: str, description: str, labels: Mapping[str, str]) -> Counter:
        return _Counted(self, self._metric(name, labels))

    def gauge(self, name: str, description: str, labels: Mapping[str, str]) -> Gauge:
        return _Counted(self, self._metric(name, labels))

    def value(self, name: str, **labels: str) -> float:
        """The sum over every series of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(v.value for (n, series), v in self.series.items() if n == name and wanted <= set(series))


@dataclass(eq=False)  # hashed by identity: InstanceMetrics keys its unsent counts by metric
class _Counted:
    owner: InMemoryMetrics
    target: _Value

    def increment(self, value: float) -> None:
        self.owner.calls += 1
        self.target.increment(value)

    def set(self, value: float) -> None:
        self.owner.calls += 1
        self.target.set(value)


class TritonMetricFamilies:
    """MetricsBackend over the python backend's `pb_utils.MetricFamily` (python backend >= 22.11; COUNTER
    and GAUGE in 23.12). Pass the `triton_python_backend_utils` module. The families are kept here: a
    MetricFamily that is garbage-collected is deleted from the server with its series."""

    def __init__(self, pb_utils: Any) -> None:
        self._pb_utils = pb_utils
        self._families: dict[str, Any] = {}

    def _family(self, name: str, description: str, kind: Any) -> Any:
        family = self._families.get(name)
        if family is None:
            family = self._pb_utils.MetricFamily(name=name, description=description, kind=kind)
            self._families[name] = family
        return family

    def counter(self, name: str, description: str, labels: Mapping[str, str]) -> Counter:
        family = self._family(name, description, self._pb_utils.MetricFamily.COUNTER)
        metric: Counter = family.Metric(labels=dict(labels))
        return metric

    def gauge(self, name: str, description: str, labels: Mapping[str, str]) -> Gauge:
        family = self._family(name, description, self._pb_utils.MetricFamily.GAUGE)
        metric: Gauge = family.Metric(labels=dict(labels))
        return metric


# (RunnerStats field, metric name, description) for the counters fed from the runner's totals.
_RUNNER_COUNTERS = (
    ("ort_runs", "runs_total", "ONNX Runtime runs (one per gathered group of requests)"),
    ("ort_run_seconds", "run_seconds_total", "Host time inside ONNX Runtime's run, in seconds"),
    (
        "host_to_device_copies",
        "host_to_device_copies_total",
        "Host-to-device tensor copies made by this backend (inputs that arrived on the host)",
    ),
    (
        "device_to_host_copies",
        "device_to_host_copies_total",
        "Device-to-host tensor copies made by this backend (outputs placed on the host)",
    ),
    (
        "device_to_device_copies",
        "device_to_device_copies_total",
        "Copies of inputs that arrived on another GPU than the instance's (e.g. CUDA shared memory)",
    ),
    (
        "arena_shrinks",
        "arena_shrinks_total",
        "Runs that shrank ONNX Runtime's CUDA memory arena after a failed run",
    ),
)


class InstanceMetrics:
    """The metrics of one model instance, labelled model, version, instance and pid (this process: see the
    module docstring).

    `loaded()` starts the sender thread, `close()` stops it after its last send; `flush()` sends now."""

    def __init__(
        self,
        backend: MetricsBackend,
        model: str,
        version: str,
        instance: str,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        pid: int | None = None,
    ) -> None:
        self.labels = {
            "model": model,
            "version": version,
            "instance": instance,
            "pid": str(os.getpid() if pid is None else pid),
        }
        self._flush_interval_s = flush_interval_s
        # One lock per lane (one lane unless the instance keeps requests in flight: runtime/inflight.py),
        # held by the lane while it runs and counts (ModelInstance.infer) and by a flush while it reads that
        # lane's runner totals, which are thus read between runs; lanes never wait for each other.
        self.locks = [threading.Lock()]
        # Executes, requests and rows not yet sent, and (in flight) the seconds requests took: an execute
        # only adds here (cheap); flush() sends them with what the runners' totals (`_stats`) gained since
        # the last send (`_last`).
        self._pending_lock = threading.Lock()
        self._pending = [0, 0, 0]
        self._request_seconds = 0.0
        self._in_flight: Callable[[], int] | None = None
        self._in_flight_sent = 0
        self._on_device = False
        self._wake = threading.Event()  # set by an execute: there is something to send
        self._stop = threading.Event()
        self._sender: threading.Thread | None = None
        self._send_lock = threading.Lock()  # one flush at a time (the sender's, or close()'s)
        self._backend = (
            backend  # a MetricFamily outlives its metrics (python backend: deleted when collected)
        )
        counter = backend.counter
        self._executes = counter(
            PREFIX + "executes_total", "execute() calls (batches from Triton)", self.labels
        )
        self._requests = counter(PREFIX + "requests_total", "Requests received by execute()", self.labels)
        self._rows = counter(
            PREFIX + "rows_total", "Batch rows (first-axis entries) of the requests received", self.labels
        )
        self._runner = [
            (stat, counter(PREFIX + name, description, self.labels))
            for stat, name, description in _RUNNER_COUNTERS
        ]
        self._placement = {
            where: counter(
                PREFIX + "output_placement_total",
                "ORT runs of GPU instances by where their outputs were handed to Triton (host or device)",
                {**self.labels, "placement": where},
            )
            for where in ("host", "device")
        }
        self._cpu_fallback = backend.gauge(
            PREFIX + "cpu_fallback",
            "1 when a GPU instance runs on CPU because its CUDA provider could not load (allow_cpu_fallback)",
            self.labels,
        )
        self._last = RunnerStats()
        self._stats = [self._last]

    @property
    def lock(self) -> threading.Lock:
        """The first lane's lock: the one lane of a classic instance."""
        return self.locks[0]

    def loaded(
        self,
        stats: RunnerStats | Sequence[RunnerStats],
        cpu_fallback: bool,
        in_flight: Callable[[], int] | None = None,
    ) -> None:
        """Report what the load decided; counting starts from `stats`, one runner's totals per lane
        (warm-up runs are not counted), and the sender thread starts. `in_flight`: the requests queued or
        running now, for an instance that keeps them in flight."""
        self._cpu_fallback.set(1.0 if cpu_fallback else 0.0)
        lanes = [stats] if isinstance(stats, RunnerStats) else list(stats)
        self.locks = [threading.Lock() for _ in lanes]
        self._stats = lanes
        self._last = total_stats(s.snapshot() for s in lanes)
        if in_flight is not None:
            self._in_flight = in_flight
            self._in_flight_gauge = self._backend.gauge(
                PREFIX + "inflight_requests", "Requests queued or running in this instance now", self.labels
            )
            self._request_seconds_counter = self._backend.counter(
                PREFIX + "request_seconds_total",
                "Seconds from execute() receiving each request to its answer being sent (instances that "
                "keep requests in flight, whose execute returns before its requests are answered)",
                self.labels,
            )
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_loop, name="triton_ort metrics", daemon=True)
            self._sender.start()

    def record_execute(
        self, stats: RunnerStats, requests: int, rows: int, on_device: bool, lane: int = 0
    ) -> None:
        """One execute() (in flight: one lane's run of what it took): its requests and rows; the lane's
        runner totals are `stats`. The caller holds that lane's lock. An execute only adds three numbers
        and wakes the sender; what the runners' totals gained is worked out when the counts are sent."""
        with self._pending_lock:
            pending = self._pending
            pending[0] += 1
            pending[1] += requests
            pending[2] += rows
        self._stats[lane], self._on_device = stats, on_device
        if not self._wake.is_set():
            self._wake.set()

    def record_answered(self, seconds: float) -> None:
        """One request answered in flight, `seconds` after execute() received it."""
        with self._pending_lock:
            self._request_seconds += seconds
        if not self._wake.is_set():
            self._wake.set()

    def _send_loop(self) -> None:
        """The sender: after an execute, wait the interval for more to join, then send them together; once
        stopped, send the rest at once and end."""
        failing = False
        stopping = False
        while not stopping:
            self._wake.wait()
            stopping = self._stop.wait(self._flush_interval_s)
            self._wake.clear()  # before the flush: an execute counted after it wakes the next round
            try:
                self.flush()
            except Exception as error:  # the stub raises its own types; the answers stand
                if not failing:  # once per run of failures, not ten times a second
                    LOGGER.warning("could not send custom metrics (their counts are lost): %s", error)
                failing = True
            else:
                failing = False

    def flush(self) -> None:
        """Send every count not yet sent (only counters that changed: each is a round trip)."""
        with self._send_lock:
            snapshots = []
            for lock, lane_stats in zip(self.locks, self._stats, strict=True):
                with lock:  # between this lane's runs: its runner's totals are not changing
                    snapshots.append(lane_stats.snapshot())
            stats = total_stats(snapshots)
            last, self._last = self._last, stats
            with self._pending_lock:
                pending, self._pending = self._pending, [0, 0, 0]
                request_seconds, self._request_seconds = self._request_seconds, 0.0
            on_device = self._on_device
            unsent: dict[Counter, float] = dict(
                zip((self._executes, self._requests, self._rows), pending, strict=True)
            )
            if self._in_flight is not None:
                unsent[self._request_seconds_counter] = request_seconds
                in_flight = self._in_flight()
                if in_flight != self._in_flight_sent:  # a gauge set is a round trip too
                    self._in_flight_gauge.set(float(in_flight))
                    self._in_flight_sent = in_flight
            for stat, metric in self._runner:
                unsent[metric] = getattr(stats, stat) - getattr(last, stat)
            if on_device:
                runs = stats.ort_runs - last.ort_runs
                to_host = stats.host_output_runs - last.host_output_runs
                unsent[self._placement["host"]] = to_host
                unsent[self._placement["device"]] = runs - to_host
            for metric, value in unsent.items():
                if value:
                    metric.increment(value)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """At unload: the sender sends what is still unsent and ends. Returns within `timeout_s` whatever
        the server does; False (with a warning) when the sender had not finished by then: its daemon thread
        is left to the process's exit, and the counts it holds are lost. Nothing was counted before
        `loaded()`, so without a sender there is nothing to send."""
        self._stop.set()
        self._wake.set()
        sender, self._sender = self._sender, None
        if sender is None:
            return True
        sender.join(timeout_s)
        if sender.is_alive():
            LOGGER.warning(
                "the custom metrics' last send did not finish within %.1f s; its counts are lost and the "
                "unload goes on",
                timeout_s,
            )
            return False
        return True


def triton_instance_metrics(pb_utils: Any, model: str, version: str, instance: str) -> InstanceMetrics | None:
    """The instance's metrics through pb_utils.MetricFamily, or None (with a warning) where the server
    cannot take them (e.g. tritonserver --allow-metrics=false): serving goes on without."""
    try:
        return InstanceMetrics(TritonMetricFamilies(pb_utils), model, version, instance)
    except Exception as error:  # the stub raises its own exception types
        LOGGER.warning("custom metrics are off for %s (%s): %s", instance, model, error)
        return None
