"""One seam per execution mode: how an instance answers Triton's execute(), chosen once.

- classic (`ClassicExecutor`): execute() reads its requests, runs them on the instance's first lane and
  returns their responses, in order.
- in flight (`InflightExecutor`, parameter inflight_lanes): execute() reads its requests, queues them for the
  lanes (inflight.py) and returns None; a lane answers each through its response sender.

The choice is made in one place (`Execution`), once: at initialize where nothing is left to ask, else at the
first execute, whose request says whether this python backend gives a model that is not decoupled a
response sender (24.06 and later; harness/releases.py). Without one an in-flight instance runs classic on
its first lane and gives the others back. The same probe decides the custom metrics' `auto`
(docs/reliability.md). From then on Triton's execute() makes one call, the chosen executor's, with no mode
flag to test: the way onnxruntime_backend and PyTriton pick a batch or a decoupled handler once.

Nothing here imports Triton: what the executors need of the python backend (reading a request, making a
response, the FINAL flag, the metric families) comes in a `PythonBackend`, which backend/model.py fills
from pb_utils. A request is used only through `TritonRequest`'s two methods.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import InferenceError, TritonOrtError
from ..model.signature import Tensors
from .copy_counter import copy_counting_enabled, count_host_device_copies
from .gather import Result, request_rows
from .inflight import InflightScheduler, Pending
from .instance import ModelInstance
from .metrics import InstanceMetrics

LOGGER = logging.getLogger(__name__)


class TritonRequest(Protocol):
    """What the executors call on pb_utils.InferenceRequest (the rest goes through PythonBackend.read)."""

    def get_response_sender(self) -> Any: ...

    def is_cancelled(self) -> bool: ...


@dataclass(frozen=True)
class PythonBackend:
    """What the executors need of Triton's python backend; backend/model.py makes it from pb_utils."""

    read: Callable[[Any], dict[str, Any]]
    """A request's tensors (a dict of its own) as the instance's arrays; TritonOrtError for a request that
    cannot be read."""
    response: Callable[[Result], Any]
    """An answer, or an error, as Triton's InferenceResponse."""
    final_flag: int
    """pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL: a response sender's last (here: only) response."""
    instance_metrics: Callable[[], InstanceMetrics | None]
    """The instance's custom metrics through Triton's metric families; None where the server refuses them."""


class Executor(Protocol):
    def execute(self, requests: list[Any]) -> list[Any] | None: ...

    def close(self) -> None: ...


class Execution:
    """The instance's execution mode, chosen once (the module's docstring); `execute` is the chosen
    executor's own method once it is chosen."""

    def __init__(self, instance: ModelInstance, backend: PythonBackend, name: str) -> None:
        """`name`: the instance's, as the log names it."""
        self.instance = instance
        self.backend = backend
        self.name = name
        self.executor: Executor | None = None
        options = instance.options
        if options.custom_metrics:  # parameter custom_metrics true; false: none; None (auto): below
            self._start_metrics()
        self.execute: Callable[[list[Any]], list[Any] | None]
        if options.inflight_lanes or options.custom_metrics is None:
            self.execute = self._first_execute
        else:  # nothing for a request to decide
            self.executor = ClassicExecutor(instance, backend)
            self.execute = self.executor.execute

    def _first_execute(self, requests: list[Any]) -> list[Any] | None:
        """Choose, with the first request's answer to the one question, then run the chosen executor."""
        refusal = _response_sender_refusal(requests[0])
        self.executor = self._mode(refusal)
        if self.instance.options.custom_metrics is None:
            self._start_metrics_where_safe(refusal)
        self.execute = self.executor.execute
        return self.execute(requests)

    def _mode(self, refusal: Exception | None) -> Executor:
        """In flight where the config asks for lanes and the requests can be answered after execute returns
        (a response sender for a model that is not decoupled); else classic, saying once why the lanes go."""
        if not self.instance.options.inflight_lanes:
            return ClassicExecutor(self.instance, self.backend)
        if refusal is not None:
            self.instance.drop_extra_lanes(
                f"this Triton's python backend cannot answer a request after execute returns ({refusal}); "
                "that needs Triton 24.06 (2.47) or later"
            )
            return ClassicExecutor(self.instance, self.backend)
        return InflightExecutor.on_lanes(self.instance, self.backend)

    def _start_metrics_where_safe(self, refusal: Exception | None) -> None:
        """custom_metrics auto: the metrics, unless this python backend restarts a stub that dies (before
        24.06, the releases without a response sender for a model that is not decoupled). There the
        stub's metric messages made the restart crash the server nearly every time (Triton 2.41: in the
        server's StubToParentMQMonitor, reading a metric message; docs/reliability.md)."""
        if refusal is not None:
            LOGGER.warning(
                "custom metrics are off for %s: this Triton's python backend restarts a stub that dies, and "
                "the stub's metric messages make that restart crash the server (docs/reliability.md); "
                "parameter custom_metrics true turns them on",
                self.name,
            )
            return
        self._start_metrics()

    def _start_metrics(self) -> None:
        in_flight = self._in_flight if self.instance.options.inflight_lanes else None
        self.instance.start_metrics(self.backend.instance_metrics(), in_flight=in_flight)

    def _in_flight(self) -> int:
        """Requests in flight now: the in-flight gauge (0 until, or unless, the lanes keep some)."""
        executor = self.executor
        return executor.in_flight() if isinstance(executor, InflightExecutor) else 0

    def close(self) -> None:
        """At unload: the executor answers what it still holds, then the instance closes (metrics)."""
        if self.executor is not None:
            self.executor.close()
        self.instance.close()


def _response_sender_refusal(request: TritonRequest) -> Exception | None:
    """Why this python backend gives a model that is not decoupled no response sender (before 24.06: the
    releases that also restart a stub that dies, harness/releases.py), or None where it gives one."""
    try:
        request.get_response_sender()
    except Exception as error:
        return error
    return None


class ClassicExecutor:
    """execute() answers its requests before it returns, computed on the instance's first lane."""

    def __init__(self, instance: ModelInstance, backend: PythonBackend) -> None:
        self.instance = instance
        self.read = backend.read
        self.response = backend.response
        self.count_copies = copy_counting_enabled()  # debug mode: TRITON_ORT_COUNT_COPIES=1

    def execute(self, requests: list[Any]) -> list[Any]:
        with count_host_device_copies(self.count_copies, self.instance.device):
            started = time.perf_counter()
            parsed: list[Tensors | Exception] = []
            read = self.read
            for request in requests:
                try:
                    parsed.append(read(request))
                except TritonOrtError as error:
                    parsed.append(error)
            readable = [item for item in parsed if not isinstance(item, Exception)]
            read_at = time.perf_counter()
            try:
                results = iter(self.instance.infer(readable))
            except Exception as error:  # not one request's fault: each readable request gets the error
                LOGGER.exception("execute failed outside any one request")
                failure = InferenceError(f"the batch could not be computed: {type(error).__name__}: {error}")
                results = iter([failure] * len(readable))
            inferred = time.perf_counter()
            response = self.response
            responses = [response(item if isinstance(item, Exception) else next(results)) for item in parsed]
            self.instance.log_execute(
                read_inputs=round((read_at - started) * 1e6, 1),
                responses=round((time.perf_counter() - inferred) * 1e6, 1),
            )
            return responses

    def close(self) -> None:
        """Nothing outlives an execute here."""


class InflightExecutor:
    """execute() queues its requests for the lanes and returns None; a lane answers each through its
    response sender."""

    def __init__(self, instance: ModelInstance, backend: PythonBackend, scheduler: InflightScheduler) -> None:
        self.instance = instance
        self.backend = backend
        self.scheduler = scheduler

    @classmethod
    def on_lanes(cls, instance: ModelInstance, backend: PythonBackend) -> InflightExecutor:
        """Requests kept in flight on every lane of the instance from now on."""
        scheduler = InflightScheduler(instance.infer, len(instance.lanes), instance.plan.max_batch_size)
        LOGGER.info("keeping requests in flight on %d lanes", len(instance.lanes))
        return cls(instance, backend, scheduler)

    def in_flight(self) -> int:
        return self.scheduler.in_flight

    def execute(self, requests: list[Any]) -> None:
        self._queue(requests)

    def _queue(self, requests: Sequence[TritonRequest]) -> None:
        """Each request queued for the lanes, which answer it through its response sender. Every request is
        read first, and its device inputs copied and waited for, before the first is queued: a lane may
        read it at once, and nothing may raise once one is queued (the server would answer, and free, every
        request of an execute that raised, answered by a lane or not)."""
        received = time.perf_counter()
        read = self.backend.read
        readings = _copies_waited_for([_read_for_lanes(read, request) for request in requests])
        batched = self.instance.plan.max_batch_size > 0
        pending = [
            Pending(
                tensors,
                functools.partial(self._send, request.get_response_sender(), received),
                rows=request_rows(tensors) if batched and isinstance(tensors, dict) else 1,
                cancelled=request.is_cancelled,
            )
            for request, tensors in zip(requests, readings, strict=True)
        ]
        try:
            self.scheduler.submit(*pending)
        except Exception as error:  # not expected; answered here rather than by the server
            LOGGER.exception("requests could not be queued")
            failure = InferenceError(f"the request could not be queued: {type(error).__name__}: {error}")
            for item in pending:
                if not item.answered:
                    item.send(failure)

    def _send(self, sender: Any, received: float, result: Result) -> None:
        """One request's FINAL response: its answer, or its error; an answer that Triton's tensors refuse
        becomes that error, so the client is answered whatever happens."""
        try:
            response = self.backend.response(result)
        except Exception as error:
            LOGGER.exception("an answer could not be made into Triton's response")
            response = self.backend.response(
                InferenceError(f"the answer could not be sent: {type(error).__name__}: {error}")
            )
        sender.send(response, flags=self.backend.final_flag)
        metrics = self.instance.metrics
        if metrics is not None:
            metrics.record_answered(time.perf_counter() - received)

    def close(self) -> None:
        """At unload: answer what is still in flight."""
        self.scheduler.close()


def _read_for_lanes(read: Callable[[Any], dict[str, Any]], request: Any) -> Tensors | Exception:
    """A request's tensors for the lanes (or its error), with every device input copied. The server releases
    a request kept in flight when execute returns, and its device inputs with it (python_backend 24.10
    src/python_be.cc: TRITONBACKEND_RequestRelease after every execute; an input in a server-side GPU
    buffer, e.g. an ensemble step's, is passed by CUDA IPC, not copied). Host inputs need no copy: the stub
    made its own when it loaded the request (src/pb_tensor.cc, py::array without a base)."""
    try:
        tensors = read(request)
        for name, tensor in tensors.items():
            if getattr(tensor, "is_cuda", False):
                tensors[name] = tensor.clone()  # on its device's current stream: waited for by the caller
        return tensors
    except TritonOrtError as error:
        return error
    except Exception as error:
        LOGGER.exception("a request could not be read")
        return InferenceError(f"the request could not be read: {type(error).__name__}: {error}")


def _device_inputs(tensors: Tensors | Exception) -> set[Any]:
    """The devices of a reading's tensors that are in device memory (none for an error or host tensors)."""
    if isinstance(tensors, Exception):
        return set()
    return {tensor.device for tensor in tensors.values() if getattr(tensor, "is_cuda", False)}


def _copies_waited_for(readings: list[Tensors | Exception]) -> list[Tensors | Exception]:
    """The readings once their device copies are complete (a lane computes on a stream of its own, which
    does not wait for the current stream); a device that fails meanwhile fails the requests that used it."""
    devices = [_device_inputs(tensors) for tensors in readings]
    if not any(devices):
        return readings
    import torch

    try:
        for device in set().union(*devices):
            torch.cuda.current_stream(device).synchronize()
    except Exception as error:
        failure = InferenceError(f"the device failed while copying the request's inputs: {error}")
        return [failure if used else tensors for tensors, used in zip(readings, devices, strict=True)]
    return readings
