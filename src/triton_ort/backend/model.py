"""Triton python-backend adapter for any ONNX model, served zero-copy through ONNX Runtime IO binding.

Triton reaches it through a one-line model.py (triton_ort.backend.MODEL_PY): the backend
`onnxruntime_zerocopy`'s, or a copy in a model's version directory. Imported only inside the python-backend
stub (it needs triton_python_backend_utils). The work lives in the `triton_ort` library (importable and
tested without Triton); this adapter only fills in the config from the ONNX file, converts between Triton's
tensors and the instance's arrays, and maps errors onto per-request TritonErrors.

Data path on a GPU (or with hooks): request -> pb_utils.Tensor -> DLPack -> torch (no copy; on the GPU when
Triton delivers it there) -> ORT IO binding by pointer -> run on the instance's CUDA stream -> torch outputs
on the device (or, when the output is small, one copy into pinned host memory: parameter output_placement)
-> DLPack -> pb_utils.Tensor -> response.

On a CPU instance without hooks: request -> pb_utils.Tensor -> as_numpy() (the array the stub made when it
loaded the request) -> ORT IO binding by pointer -> numpy outputs -> pb_utils.Tensor -> response; torch is
never imported there, so the stub carries only numpy and ONNX Runtime (triton_ort.runtime.arrays).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_ort import InferenceError, ModelInstance, TritonOrtError, triton_code
from triton_ort.model.autocomplete import apply_completed, complete_config, zero_copy_warning
from triton_ort.model.dtypes import from_torch_dtype
from triton_ort.runtime.arrays import require_torch
from triton_ort.runtime.copy_counter import copy_counting_enabled, count_host_device_copies
from triton_ort.runtime.gather import request_rows
from triton_ort.runtime.inflight import Pending
from triton_ort.runtime.metrics import triton_instance_metrics

LOGGER = logging.getLogger("triton_ort.backend")


class _TritonLogHandler(logging.Handler):
    """Sends the library's `logging` records to Triton's log, at the matching level."""

    def emit(self, record: logging.LogRecord) -> None:
        message = self.format(record)
        if record.levelno >= logging.ERROR:
            pb_utils.Logger.log_error(message)
        elif record.levelno >= logging.WARNING:
            pb_utils.Logger.log_warn(message)
        elif record.levelno >= logging.INFO:
            pb_utils.Logger.log_info(message)
        else:
            pb_utils.Logger.log_verbose(message)


def _route_library_logging() -> None:
    library_logger = logging.getLogger("triton_ort")
    if not any(isinstance(h, _TritonLogHandler) for h in library_logger.handlers):
        library_logger.addHandler(_TritonLogHandler())
        # DEBUG adds a line per execute (devices, ORT runs, host copies); Triton shows it at --log-verbose 1.
        library_logger.setLevel(os.environ.get("TRITON_ORT_LOG_LEVEL", "INFO").upper())
        library_logger.propagate = False


def _read_inputs(request: pb_utils.InferenceRequest, on_numpy: bool) -> dict[str, Any]:
    """Triton's tensors as the instance's arrays: the stub's numpy arrays (`on_numpy`) or torch tensors
    sharing their memory (through DLPack: on the host, or on the device); BYTES as the numpy array of bytes
    as_numpy() gives (DLPack has no strings)."""
    if on_numpy:
        return {tensor.name(): _host_array(tensor) for tensor in request.inputs()}
    import torch.utils.dlpack

    tensors: dict[str, Any] = {}
    for tensor in request.inputs():
        try:
            tensors[tensor.name()] = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())
        except Exception as error:
            strings = _strings(tensor)
            if strings is None:
                raise TritonOrtError(
                    f"input {tensor.name()!r} cannot be read through DLPack: {error}"
                ) from error
            tensors[tensor.name()] = strings
    return tensors


def _device_inputs(tensors: dict[str, Any] | Exception) -> set[Any]:
    """The devices of a reading's tensors that are in device memory (none for an error or host tensors)."""
    if isinstance(tensors, Exception):
        return set()
    return {tensor.device for tensor in tensors.values() if getattr(tensor, "is_cuda", False)}


def _read_for_lanes(request: pb_utils.InferenceRequest, on_numpy: bool) -> dict[str, Any] | Exception:
    """A request's tensors for the lanes (or its error), with every device input copied. The server releases
    a request kept in flight when execute returns, and its device inputs with it (python_backend 24.10
    src/python_be.cc: TRITONBACKEND_RequestRelease after every execute; an input in a server-side GPU
    buffer, e.g. an ensemble step's, is passed by CUDA IPC, not copied). Host inputs need no copy: the stub
    made its own when it loaded the request (src/pb_tensor.cc, py::array without a base)."""
    try:
        tensors = _read_inputs(request, on_numpy)
        for name, tensor in tensors.items():
            if getattr(tensor, "is_cuda", False):
                tensors[name] = tensor.clone()  # on its device's current stream: waited for by the caller
        return tensors
    except TritonOrtError as error:
        return error
    except Exception as error:
        LOGGER.exception("a request could not be read")
        return InferenceError(f"the request could not be read: {type(error).__name__}: {error}")


def _copies_waited_for(readings: list[dict[str, Any] | Exception]) -> list[dict[str, Any] | Exception]:
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


def _host_array(tensor: pb_utils.Tensor) -> Any:
    """Triton's host tensor as numpy (as_numpy(): the array the stub made when it loaded the request, no
    further copy). A device tensor (a CPU instance whose config lets the python
    backend hand over GPU inputs) is copied to the host once, through torch, which reads it."""
    if tensor.is_cpu():
        return tensor.as_numpy()
    import torch.utils.dlpack

    return torch.utils.dlpack.from_dlpack(tensor.to_dlpack()).cpu().numpy()


def _strings(tensor: pb_utils.Tensor) -> Any:
    """A BYTES input's values (the numpy object array of bytes as_numpy() gives), else None."""
    try:
        values = tensor.as_numpy()
    except Exception:
        return None
    return values if values.dtype == object else None


def _response_sender_refusal(request: pb_utils.InferenceRequest) -> Exception | None:
    """Why this python backend gives a model that is not decoupled no response sender (before 24.06: the
    releases that also restart a stub that dies, harness/releases.py), or None where it gives one."""
    try:
        request.get_response_sender()
    except Exception as error:
        return error
    return None


def _response(result: dict[str, Any] | Exception) -> pb_utils.InferenceResponse:
    if isinstance(result, Exception):
        # The library says whose error it is (triton_ort.errors.triton_code); Triton's constant carries it.
        code = getattr(pb_utils.TritonError, triton_code(result))
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(result), code))
    return pb_utils.InferenceResponse(
        output_tensors=[_output(name, tensor) for name, tensor in result.items()]
    )


def _output(name: str, tensor: Any) -> pb_utils.Tensor:
    """One output as Triton's tensor, without a copy: a device tensor through DLPack, a host tensor as a
    numpy view of its memory (the form the stub handles fastest: measured, docs/benchmarks.md "Under
    load"), strings as the numpy array the stub serialises as BYTES."""
    if isinstance(tensor, np.ndarray):
        return pb_utils.Tensor(name, tensor)
    import torch.utils.dlpack

    if tensor.device.type == "cpu" and _numpy_viewable(tensor.dtype):
        return pb_utils.Tensor(name, tensor.numpy())
    # ModelInstance.infer has synchronised its stream, so a raw capsule is safe to hand over unsynchronised
    # (a capsule skips the backend's own stream synchronisation, which an object with __dlpack__ would do).
    return pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(tensor))  # type: ignore[attr-defined]


@functools.cache
def _numpy_viewable(dtype: Any) -> bool:
    """A torch dtype with a numpy equivalent: every numeric type of the one table but bfloat16, which numpy
    lacks (it goes through DLPack, as device tensors do)."""
    element_type = from_torch_dtype(dtype)
    return element_type is not None and element_type.numpy_dtype is not None


def _gpu_visible() -> bool:
    """Whether torch sees a GPU; a Python without torch serves CPU instances only."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _carries_bf16() -> bool:
    """Whether this python backend can carry BF16 tensors (24.08 and later), probed with the call that BF16
    outputs go through: a BF16 tensor handed over by DLPack. Before 24.08 the stub's DLPack conversion has no
    BF16 (python_backend r23.12 src/pb_stub_utils.cc dlpack_to_triton_type gives TYPE_INVALID, and
    PbTensor's constructor throws); the same release added BF16 to both directions (2b12abe)."""
    require_torch("a model with BF16 tensors")  # they go through DLPack, on torch
    import torch.utils.dlpack

    probe = torch.zeros(1, dtype=torch.bfloat16)
    try:
        capsule = torch.utils.dlpack.to_dlpack(probe)  # type: ignore[attr-defined]
        pb_utils.Tensor.from_dlpack("bf16_probe", capsule)
    except Exception:
        return False
    return True


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        """Inputs, outputs, dims and max_batch_size from the ONNX file (see triton_ort.model.autocomplete).

        Runs in a stub of its own before any instance; pb_utils.get_model_dir() is the version directory
        being loaded (python_backend's pb_stub.cc: the stub's model path is <model>/<version>/model.py)."""
        _route_library_logging()
        model_config = auto_complete_model_config.as_dict()
        # Here, not in initialize(): one auto-complete stub per load, where each instance has its own stub.
        if warning := zero_copy_warning(model_config, gpu_visible=_gpu_visible):
            LOGGER.warning(warning)
        try:
            completed = complete_config(model_config, Path(pb_utils.get_model_dir()))
        except TritonOrtError as error:
            # Not raised here: on 23.12 a failed auto-complete left the load hanging whenever another model
            # of this backend was running (measured). initialize() reads the same file and parameters and
            # fails the load with this same message.
            LOGGER.warning("model %r: config.pbtxt not completed: %s", model_config.get("name"), error)
            return auto_complete_model_config
        apply_completed(auto_complete_model_config, completed)
        return auto_complete_model_config

    def initialize(self, args: dict[str, str]) -> None:
        _route_library_logging()
        model_config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        try:
            self.instance = ModelInstance(
                model_config,
                version_dir,
                instance_kind=args["model_instance_kind"],
                device_id=int(args["model_instance_device_id"]),
                carries_bf16=_carries_bf16,  # asked only of a model with BF16 tensors
                numpy_on_cpu=True,  # a CPU instance without hooks: no torch in this stub
            )
        except TritonOrtError as error:
            raise pb_utils.TritonModelException(
                f"model {args['model_name']!r} ({args['model_instance_name']}) failed to load: {error}"
            ) from error
        # parameter custom_metrics: true, false, or auto (decided at the first execute: docs/reliability.md)
        self.metric_labels = (args["model_name"], args["model_version"], args["model_instance_name"])
        self.metrics_decided = self.instance.options.custom_metrics is not None
        if self.instance.options.custom_metrics:
            self.instance.start_metrics(triton_instance_metrics(pb_utils, *self.metric_labels))
        self.count_copies = copy_counting_enabled()  # debug mode: TRITON_ORT_COUNT_COPIES=1
        # parameter inflight_lanes: decided at the first execute, whose requests say whether this python
        # backend lets a model that is not decoupled answer after execute returns
        self.inflight: bool | None = None if self.instance.options.inflight_lanes else False

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse] | None:
        if self.inflight is None:
            self.inflight = self._can_answer_later(requests[0])
        if not self.metrics_decided:
            self.metrics_decided = True
            self._start_metrics_where_safe(requests[0])
        if self.inflight:
            self._queue(requests)
            return None
        with count_host_device_copies(self.count_copies, self.instance.device):
            started = time.perf_counter()
            parsed: list[dict[str, Any] | Exception] = []
            on_numpy = self.instance.on_numpy
            for request in requests:
                try:
                    parsed.append(_read_inputs(request, on_numpy))
                except TritonOrtError as error:
                    parsed.append(error)
            readable = [item for item in parsed if not isinstance(item, Exception)]
            read = time.perf_counter()
            try:
                results = iter(self.instance.infer(readable))
            except Exception as error:  # not one request's fault: each readable request gets the error
                LOGGER.exception("execute failed outside any one request")
                failure = InferenceError(f"the batch could not be computed: {type(error).__name__}: {error}")
                results = iter([failure] * len(readable))
            inferred = time.perf_counter()
            responses = [_response(item if isinstance(item, Exception) else next(results)) for item in parsed]
            self.instance.log_execute(
                read_inputs=round((read - started) * 1e6, 1),
                responses=round((time.perf_counter() - inferred) * 1e6, 1),
            )
            return responses

    def _start_metrics_where_safe(self, request: pb_utils.InferenceRequest) -> None:
        """custom_metrics auto: the metrics, unless this python backend restarts a stub that dies (before
        24.06, the releases without a response sender for a model that is not decoupled). There the
        stub's metric messages made the restart crash the server nearly every time (Triton 2.41: in the
        server's StubToParentMQMonitor, reading a metric message; docs/reliability.md)."""
        if _response_sender_refusal(request) is not None:
            LOGGER.warning(
                "custom metrics are off for %s: this Triton's python backend restarts a stub that dies, and "
                "the stub's metric messages make that restart crash the server (docs/reliability.md); "
                "parameter custom_metrics true turns them on",
                self.metric_labels[2],
            )
            return
        self.instance.start_metrics(triton_instance_metrics(pb_utils, *self.metric_labels))

    def _can_answer_later(self, request: pb_utils.InferenceRequest) -> bool:
        """Whether requests can be answered after execute returns: the response sender of a model that is
        not decoupled (python backend 24.06 and later; 23.12 refuses it, harness/releases.py). If not, the
        instance runs classic on its first lane, and says so once."""
        if (refusal := _response_sender_refusal(request)) is not None:
            self.instance.drop_extra_lanes(
                f"this Triton's python backend cannot answer a request after execute returns ({refusal}); "
                "that needs Triton 24.06 (2.47) or later"
            )
            return False
        self.instance.start_inflight()
        return True

    def _queue(self, requests: list[pb_utils.InferenceRequest]) -> None:
        """Each request queued for the lanes, which answer it through its response sender. Every request is
        read first, and its device inputs copied and waited for, before the first is queued: a lane may
        read it at once, and nothing may raise once one is queued (the server would answer, and free, every
        request of an execute that raised, answered by a lane or not)."""
        received = time.perf_counter()
        on_numpy = self.instance.on_numpy
        readings = [_read_for_lanes(request, on_numpy) for request in requests]
        readings = _copies_waited_for(readings)
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
            self.instance.submit(*pending)
        except Exception as error:  # not expected; answered here rather than by the server
            LOGGER.exception("requests could not be queued")
            failure = InferenceError(f"the request could not be queued: {type(error).__name__}: {error}")
            for item in pending:
                if not item.answered:
                    item.send(failure)

    def _send(self, sender: Any, received: float, result: dict[str, Any] | Exception) -> None:
        """One request's FINAL response: its answer, or its error; an answer that Triton's tensors refuse
        becomes that error, so the client is answered whatever happens."""
        try:
            response = _response(result)
        except Exception as error:
            LOGGER.exception("an answer could not be made into Triton's response")
            response = _response(
                InferenceError(f"the answer could not be sent: {type(error).__name__}: {error}")
            )
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if self.instance.metrics is not None:
            self.instance.metrics.record_answered(time.perf_counter() - received)

    def finalize(self) -> None:
        self.instance.close()
        del self.instance
