"""ONNX Runtime session factory: the session options and providers a model's config asks for, and the checks
that the session got them (what to say when a provider is missing is providers.py's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidProtobuf

from ..errors import ConfigError, ProviderError, unreadable_onnx_file
from ..model.custom_ops import check_op_libraries, unregistered_operator_error
from ..model.options import ModelOptions
from ..model.signature import OnnxSignature, read_specs
from .providers import (
    CPU_EP,
    CUDA_EP,
    OPENVINO_EP,
    TENSORRT_EP,
    diagnose_missing_cuda_provider,
    diagnose_missing_tensorrt_provider,
    preload_cuda_libraries,
)

LOGGER = logging.getLogger(__name__)

_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

_EXECUTION_MODES = {
    "sequential": ort.ExecutionMode.ORT_SEQUENTIAL,
    "parallel": ort.ExecutionMode.ORT_PARALLEL,
}

# ORT's log severities (onnxruntime/core/common/logging/severity.h).
ORT_WARNING, ORT_ERROR, ORT_FATAL = 2, 3, 4


def ort_log_severity(logger: logging.Logger = LOGGER) -> int:
    """ORT's log severity for our logger's level: ORT's warnings only when we are debugging, its errors
    otherwise.

    ORT writes its log straight to the process's stderr, ANSI-coloured whether or not that is a terminal,
    and its Python API has no way to hand the lines to `logging` before 1.32 (set_default_logger_callback;
    the image has 1.20, the GPU host 1.31). Its warnings are about
    ORT's own choices (unused initializers, "No registered plugin EP device found", nodes left on CPU);
    what matters to a user (a provider that did not start, a retry with other options) create_session
    checks and reports itself. An ORT error still reaches stderr, and Triton's log inside the stub.
    """
    if logger.isEnabledFor(logging.DEBUG):
        return ORT_WARNING
    if logger.isEnabledFor(logging.ERROR):
        return ORT_ERROR
    return ORT_FATAL


@dataclass(frozen=True)
class Placement:
    """Where a session computes: 'cuda' with a device id and the CUDA stream to compute on, or 'cpu'."""

    device_type: str
    device_id: int = 0
    cuda_stream: int | None = None

    @property
    def is_cuda(self) -> bool:
        return self.device_type == "cuda"


SharedWeights = Mapping[str, ort.OrtValue]
"""Initializers by name, already where the session computes, that every session given them uses in place
instead of a copy of its own (ORT's SessionOptions.add_initializer, used in place when its device is the
planned one): the lanes of one GPU instance hold the model's weights once."""


def shared_weights(model_path: Path, placement: Placement) -> SharedWeights:
    """The model's initializers (main graph), each copied once to where `placement` computes, into buffers
    that we own and ORT wraps without a copy.

    ORT takes an initializer only over a buffer its user owns (SessionOptions::AddInitializer: "Buffer
    containing the initializer must be owned by the user"). `OrtValue.ortvalue_from_numpy(array, "cuda")`
    allocates the device copy with ORT's own allocator, so it is refused on a GPU, while on the CPU it wraps
    numpy's memory and passes. `OrtValue.from_dlpack` wraps the producer's memory instead
    (onnxruntime/core/dlpack/dlpack_converter.cc DlpackToOrtValue: a Tensor over external data, whose
    deleter hands the buffer back to its producer), so the buffers here are numpy's on the CPU and torch's on
    a GPU, and live as long as the values. Each value is offered to a scratch SessionOptions first: what ORT
    would refuse raises here, where the caller falls back, not inside a session's creation."""
    from ..model.onnx_files import initializer_arrays

    buffers: dict[str, Any] = {
        name: np.array(array, copy=True)  # writable and contiguous: DLPack exports neither a read-only
        for name, array in initializer_arrays(model_path).items()  # nor a strided array
    }
    if placement.is_cuda:
        import torch

        device = torch.device("cuda", placement.device_id)
        buffers = {name: torch.from_numpy(array).to(device) for name, array in buffers.items()}
        torch.cuda.synchronize(device)  # ORT reads them from its own streams
    values = {name: ort.OrtValue.from_dlpack(buffer) for name, buffer in buffers.items()}
    probe = ort.SessionOptions()
    for name, value in values.items():
        probe.add_initializer(name, value)
    return values


def _session_options(options: ModelOptions, shared: SharedWeights | None = None) -> ort.SessionOptions:
    session_options = ort.SessionOptions()
    for name, value in (shared or {}).items():  # the caller keeps them alive as long as the session
        session_options.add_initializer(name, value)
    check_op_libraries(options.op_libraries)  # a missing file named as `triton-ort config` names it
    for library in options.op_libraries:  # as the native backend: before the session, paths unchanged
        try:
            session_options.register_custom_ops_library(library)
        except Exception as error:  # ORT's Fail: dlopen's reason, or no RegisterCustomOps symbol
            raise ConfigError(
                f"model_operations op_library_filename {library!r} could not be registered with ONNX "
                f"Runtime: {str(error).removeprefix('[ONNXRuntimeError] : 1 : FAIL : ')}"
            ) from error
    session_options.log_severity_level = ort_log_severity()
    session_options.graph_optimization_level = _OPTIMIZATION_LEVELS[options.graph_optimization_level]
    session_options.execution_mode = _EXECUTION_MODES[options.execution_mode]
    session_options.intra_op_num_threads = options.intra_op_num_threads
    session_options.inter_op_num_threads = options.inter_op_num_threads
    if options.enable_mem_arena is not None:
        session_options.enable_cpu_mem_arena = options.enable_mem_arena
    if options.enable_mem_pattern is not None:
        session_options.enable_mem_pattern = options.enable_mem_pattern
    if options.use_device_allocator_for_initializers is not None:
        session_options.add_session_config_entry(
            "session.use_device_allocator_for_initializers",
            "1" if options.use_device_allocator_for_initializers else "0",
        )
    if options.allow_spinning is not None:
        session_options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if options.allow_spinning else "0"
        )
    return session_options


def cuda_provider_options(options: ModelOptions, placement: Placement) -> dict[str, str]:
    provider_options = {
        **options.cuda_options,
        "device_id": str(placement.device_id),
        # ORT's own copies go on the default stream; our copies and kernels are ordered on cuda_stream.
        "do_copy_in_default_stream": "1",
        "arena_extend_strategy": options.arena_extend_strategy,
        "cudnn_conv_algo_search": options.cudnn_conv_algo_search,
    }
    if placement.cuda_stream is not None:
        # Kernels run on the caller's (torch's) stream, so torch allocations, copies and ORT kernels are
        # ordered without extra synchronisation.
        provider_options["user_compute_stream"] = str(placement.cuda_stream)
    if options.gpu_mem_limit:
        provider_options["gpu_mem_limit"] = str(options.gpu_mem_limit)
    if options.cuda_graph:
        provider_options["enable_cuda_graph"] = "1"
    return provider_options


def tensorrt_provider_options(options: ModelOptions, placement: Placement) -> dict[str, str]:
    """The TensorRT EP's options: the config's, on the instance's device and stream (as the CUDA EP)."""
    assert options.tensorrt_options is not None
    provider_options = {**options.tensorrt_options, "device_id": str(placement.device_id)}
    if placement.cuda_stream is not None:
        provider_options["has_user_compute_stream"] = "1"
        provider_options["user_compute_stream"] = str(placement.cuda_stream)
    return provider_options


def requested_providers(
    options: ModelOptions, placement: Placement
) -> list[str | tuple[str, dict[str, str]]]:
    """The providers to ask ORT for, in priority order, as the native backend orders them: TensorRT, then
    CUDA for the nodes TensorRT does not take, then OpenVINO, then CPU."""
    providers: list[str | tuple[str, dict[str, str]]] = []
    if placement.is_cuda:
        if options.tensorrt_options is not None:
            providers.append((TENSORRT_EP, tensorrt_provider_options(options, placement)))
        providers.append((CUDA_EP, cuda_provider_options(options, placement)))
    if options.openvino:
        providers.append((OPENVINO_EP, {"device_type": "CPU"}))
    providers.append(CPU_EP)
    return providers


def _names(providers: list[str | tuple[str, dict[str, str]]]) -> list[str]:
    return [p if isinstance(p, str) else p[0] for p in providers]


def create_session(
    model_path: Path, options: ModelOptions, placement: Placement, shared: SharedWeights | None = None
) -> ort.InferenceSession:
    """A session on `placement`; a GPU session without a working CUDA EP (or TensorRT EP, when the config
    asks for it) fails here, with a diagnosis. `shared`: weights it uses in place of its own copy."""
    if not model_path.is_file():
        raise ConfigError(
            f"ONNX file {model_path} does not exist (parameter onnx_file={options.onnx_file!r})"
        )
    if options.openvino and OPENVINO_EP not in ort.get_available_providers():
        raise ProviderError(
            "the openvino execution accelerator was requested (optimization.execution_accelerators."
            f"cpu_execution_accelerator) but this onnxruntime ({ort.__version__}, providers "
            f"{ort.get_available_providers()}) has no OpenVINOExecutionProvider. Fix: install "
            "onnxruntime-openvino in place of onnxruntime, or remove the accelerator"
        )
    # The default logger is the process's: it writes what ORT logs outside a session, such as the provider
    # lookup's "No registered plugin EP device found" (ORT >= 1.26) at every CUDA session. Set at each
    # creation, so that a level changed since the last one applies.
    ort.set_default_logger_severity(ort_log_severity())
    providers = requested_providers(options, placement)
    if placement.is_cuda and CUDA_EP in ort.get_available_providers():
        preload_cuda_libraries()
    else:
        # Without the CUDA provider built in, ORT refuses to create a session that names it; the check
        # below then says why it is missing.
        providers = [
            p for p in providers if (p if isinstance(p, str) else p[0]) not in (CUDA_EP, TENSORRT_EP)
        ]
    try:
        session, ep_error = _new_session(model_path, options, providers, shared)
    except Exception as error:  # ORT raises its Fail, which its own retry does not catch
        if not (placement.is_cuda and options.cuda_graph and _GRAPHS_REFUSED.search(str(error))):
            raise
        session, ep_error = _without_graphs(model_path, options, placement, str(error), shared)
        options = dataclasses.replace(options, cuda_graph=False)
    if placement.is_cuda and options.cuda_graph and _GRAPHS_REFUSED.search(ep_error):  # ORT retried on CPU
        session, ep_error = _without_graphs(model_path, options, placement, ep_error, shared)
        options = dataclasses.replace(options, cuda_graph=False)
    if TENSORRT_EP in _names(providers) and TENSORRT_EP not in session.get_providers():
        # ORT's Python API retries without a provider that fails to start, but with default CUDA options
        # (not the instance's stream): never serve that session.
        diagnosis = diagnose_missing_tensorrt_provider()
        if not options.allow_cuda_fallback:
            raise ProviderError(diagnosis)
        LOGGER.warning(
            "allow_cuda_fallback is set: running %s on the CUDA EP. %s", model_path.name, diagnosis
        )
        providers = [p for p in providers if _names([p]) != [TENSORRT_EP]]
        session, ep_error = _new_session(model_path, options, providers, shared)
    if placement.is_cuda and CUDA_EP not in session.get_providers():
        diagnosis = diagnose_missing_cuda_provider(ep_error)
        if not options.allow_cpu_fallback:
            raise ProviderError(diagnosis)
        LOGGER.warning("allow_cpu_fallback is set: running %s on CPU. %s", model_path.name, diagnosis)
    elif placement.is_cuda:
        asked = cuda_provider_options(options, placement)
        differing = cuda_options_not_applied(session.get_provider_options().get(CUDA_EP, {}), asked)
        if differing:
            # ORT retried with a default CUDA provider (device 0, its own stream) after an error; serving
            # that would compute on another device or stream than the one our tensors are ordered on.
            raise ProviderError(
                "ONNX Runtime did not start the CUDA provider with the options asked ("
                + "; ".join(f"{key}: asked {a!r}, got {e!r}" for key, (a, e) in differing.items())
                + f"): it retried with its defaults after an error{': ' + ep_error if ep_error else ''}. "
                f"Fix: check the 'cuda' accelerator's parameters against this onnxruntime ({ort.__version__})"
            )
    return session


_GRAPHS_REFUSED = re.compile(r"cannot use the (CUDA Graph|graph capture) feature")
"""ORT's words (inference_session.cc; "CUDA Graph" before 1.18) when a session asked to capture graphs has
compute nodes off the CUDA EP, memcpy nodes, or control flow."""


def cuda_graphs_enabled(session: ort.InferenceSession) -> bool:
    """Whether the session's CUDA EP captures graphs (create_session turns them off where ORT refuses)."""
    cuda = session.get_provider_options().get(CUDA_EP, {})
    return str(cuda.get("enable_cuda_graph", "0")) == "1"


def _without_graphs(
    model_path: Path,
    options: ModelOptions,
    placement: Placement,
    refusal: str,
    shared: SharedWeights | None = None,
) -> tuple[ort.InferenceSession, str]:
    """The session again without CUDA graphs, where ORT refused to capture the model (a compute node off the
    CUDA EP, copies between devices, control flow): CUDA graphs are an optimisation, so the model still
    serves on the CUDA EP, and the log says why it runs without them."""
    LOGGER.warning(
        "CUDA graphs are off for %s: ONNX Runtime cannot capture this model (%s); it runs on the CUDA EP "
        "without them",
        model_path.name,
        refusal.strip(),
    )
    options = dataclasses.replace(options, cuda_graph=False)
    return _new_session(model_path, options, requested_providers(options, placement), shared)


def _new_session(
    model_path: Path,
    options: ModelOptions,
    providers: list[str | tuple[str, dict[str, str]]],
    shared: SharedWeights | None = None,
) -> tuple[ort.InferenceSession, str]:
    """The session, and the error ORT printed if a provider failed and ORT retried with fewer providers or
    default options ("EP Error ... Falling back to ..."), which the checks after this report."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            session = ort.InferenceSession(
                str(model_path), _session_options(options, shared), providers=providers
            )
    except InvalidProtobuf as error:  # a damaged file, or not an ONNX file: the message auto-complete gives
        raise unreadable_onnx_file(model_path, error) from error
    except Exception as error:  # an operator no one registers: the node, its domain and the config line
        if refusal := unregistered_operator_error(model_path, options.op_libraries, str(error)):
            raise refusal from error
        raise
    # a provider failure while running raises, instead of ORT re-running the request on CPU
    session.disable_fallback()
    printed = captured.getvalue()
    if printed:
        LOGGER.warning("ONNX Runtime while creating the session: %s", printed.strip())
    return session, ep_error_of(printed)


def ep_error_of(printed: str) -> str:
    """The error in ORT's retry notice ("EP Error <error> when using [<providers and options>]"), or ""."""
    for line in printed.splitlines():
        if line.startswith("EP Error "):
            return line.removeprefix("EP Error ").partition(" when using [")[0].strip()
    return ""


# The CUDA EP options that place the session on our device and stream; ORT reports them back in these
# forms (CUDAExecutionProviderInfo::ToProviderOptions: decimal numbers, bools as 1/0).
_PLACING_CUDA_OPTIONS = (
    "device_id",
    "has_user_compute_stream",
    "user_compute_stream",
    "do_copy_in_default_stream",
)


def cuda_options_not_applied(
    effective: Mapping[str, str], asked: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """The placing options asked for that the session's CUDA EP does not have: key -> (asked, effective).
    An option ORT does not report back is not judged."""
    expected = dict(asked)
    if asked.get("user_compute_stream", "0") != "0":  # 0, the legacy default stream, is "no stream" to ORT
        expected.setdefault("has_user_compute_stream", "1")
    return {
        key: (expected[key], effective[key])
        for key in _PLACING_CUDA_OPTIONS
        if key in expected and key in effective and effective[key] != expected[key]
    }


def session_signature(session: ort.InferenceSession) -> OnnxSignature:
    """The session's tensors as ORT reads them: what the model plan and the runner are built from."""
    return OnnxSignature(
        read_specs(session.get_inputs(), "input"),
        read_specs(session.get_outputs(), "output"),
        read_specs(session.get_overridable_initializers(), "input"),
    )


def reads_inputs_on_host(session: ort.InferenceSession) -> bool:
    """Whether ORT reads some input of a CUDA session on the host (a CPU node's input, such as a shape):
    it then copies that input at bind time. A session that cannot say is taken to do so."""
    try:
        infos = session.get_input_memory_infos()
    except RuntimeError:
        return True
    return infos is None or any(info.name != "Cuda" for info in infos)


def session_placement(session: ort.InferenceSession, requested: Placement) -> Placement:
    """Where the session really runs (CPU when a CUDA request fell back)."""
    if requested.is_cuda and CUDA_EP not in session.get_providers():
        return Placement("cpu")
    return requested
