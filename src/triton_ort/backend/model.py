"""Triton python-backend adapter for any ONNX model, served zero-copy through ONNX Runtime IO binding.

Triton reaches it through a one-line model.py (triton_ort.backend.MODEL_PY): the backend
`onnxruntime_zerocopy`'s, or a copy in a model's version directory. Imported only inside the python-backend
stub (it needs triton_python_backend_utils). The work lives in the `triton_ort` library (importable and
tested without Triton); this adapter only fills in the config from the ONNX file, converts between Triton's
tensors and the instance's arrays, and maps errors onto per-request TritonErrors. How an execute is answered
(classic, or in flight) is triton_ort.runtime.execute's, chosen once.

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
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_ort import ModelInstance, TritonOrtError, triton_code
from triton_ort.model.autocomplete import apply_completed, complete_config, zero_copy_warning
from triton_ort.model.dtypes import from_torch_dtype
from triton_ort.runtime.arrays import require_torch
from triton_ort.runtime.execute import Execution, PythonBackend
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


def _python_backend(on_numpy: bool, labels: tuple[str, str, str]) -> PythonBackend:
    """What the executors need of pb_utils, for an instance that reads numpy (`on_numpy`) or torch, whose
    metrics carry `labels` (model, version, instance)."""
    return PythonBackend(
        read=functools.partial(_read_inputs, on_numpy=on_numpy),
        response=_response,
        final_flag=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        instance_metrics=functools.partial(triton_instance_metrics, pb_utils, *labels),
    )


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
        # classic or in flight, and the custom metrics' auto: decided once (triton_ort.runtime.execute)
        labels = (args["model_name"], args["model_version"], args["model_instance_name"])
        backend = _python_backend(self.instance.on_numpy, labels)
        self.execution = Execution(self.instance, backend, name=args["model_instance_name"])

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse] | None:
        return self.execution.execute(requests)

    def finalize(self) -> None:
        self.execution.close()
        del self.execution, self.instance
