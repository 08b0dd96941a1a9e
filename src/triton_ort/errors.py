"""The library's exceptions, and the one place that says which Triton error code each of them is.

Load-time problems (`ConfigError`, `ProviderError`) fail the model load with a message that names the cause
and the fix. Request-time problems fail one request only; the Triton adapter turns them into a per-request
`TritonError` so the neighbours in the same batch still get their answers:

- `InputError`: what the request sent is wrong (shape, dtype, values, or a size no device here can hold):
  the client's error, INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT); resending it cannot succeed.
- `InferenceError`: the server failed to compute a valid request (an ONNX Runtime or a device failure):
  INTERNAL.
- `Unavailable`: a server-side resource was short for now (device memory taken by the current load): a retry
  can succeed, so UNAVAILABLE (HTTP 503 from Triton 2.51 on, gRPC UNAVAILABLE).
"""

from __future__ import annotations

from typing import Literal

# The names of pb_utils.TritonError's code constants (python_backend src/pb_stub.cc, r23.12 and later).
TritonCode = Literal["INVALID_ARG", "INTERNAL", "UNAVAILABLE", "CANCELLED"]


class TritonOrtError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(TritonOrtError):
    """config.pbtxt, its parameters, or the ONNX file do not fit together (or the file is missing)."""


class ProviderError(TritonOrtError):
    """The execution provider that was asked for is not usable in this process."""


class InputError(TritonOrtError):
    """One request's tensors do not match what the model expects, or cannot fit by their own size."""


class InferenceError(TritonOrtError):
    """The server could not compute a valid request; `retryable` says whether a retry can succeed."""

    retryable = False


class Unavailable(InferenceError):
    """A resource was short for now (e.g. device memory held by the current load): retry later."""

    retryable = True


class Cancelled(TritonOrtError):
    """The client cancelled the request before it ran (a request kept in flight: runtime/inflight.py)."""


def unreadable_onnx_file(path: object, detail: object) -> ConfigError:
    """The one message for an ONNX file that cannot be parsed, whoever reads it (the onnx package at
    auto-complete and in `triton-ort config`, ONNX Runtime at load), with the reader's own error after it."""
    return ConfigError(f"{str(path)!r} is not a readable ONNX file: {detail}")


def triton_code(error: BaseException) -> TritonCode:
    """The pb_utils.TritonError code name for a request's failure (the adapter maps name -> constant)."""
    if isinstance(error, InputError):
        return "INVALID_ARG"
    if isinstance(error, Cancelled):
        return "CANCELLED"
    if isinstance(error, InferenceError) and error.retryable:
        return "UNAVAILABLE"
    return "INTERNAL"
