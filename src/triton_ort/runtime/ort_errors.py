"""What ONNX Runtime's errors say, read in one place: whose fault a failed run is (`classify_failure`:
the request's, the device's for now, or the server's) and which outputs a run computed at another size
than their bound buffers (`mismatched_outputs`). ORT's Python API drops most status codes, so both read
its messages; each pattern says which ORT source words it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING

from onnxruntime.capi import onnxruntime_pybind11_state as ort_status

from ..errors import InferenceError, InputError, TritonOrtError, Unavailable

if TYPE_CHECKING:
    from .session import Placement


# ORT's refusal of an output buffer bound at another shape than the run computes. 1.32 names the output:
# "The output OrtValue provided for output 'present' of node '' (Concat) has shape {2,6} but the computed
# output shape for this run is {2,4}"; earlier releases do not: "OrtValue shape verification failed.
# Current shape:{2,6} Requested shape:{2,4}", or the allocation planner's "Shape mismatch attempting to
# re-use buffer" (also said for ORT's own buffers: such a run fails again, and then stands).
_BOUND_SHAPE_MISMATCH = re.compile(
    r"The output OrtValue provided for output '(?P<name>[^']+)'.* has shape .* but the computed output shape"
    r"|OrtValue shape verification failed"
    r"|Shape mismatch attempting to re-use buffer"
)


def mismatched_outputs(error: Exception, planned: Collection[str]) -> frozenset[str]:
    """The planned outputs that ORT computed at another size than their bound buffers (`error`: a failed
    run), or none where the run failed otherwise. Where ORT does not name the output, every planned one
    whose size the plan took from an input axis."""
    found = _BOUND_SHAPE_MISMATCH.search(str(error))
    if found is None:
        return frozenset()
    if found["name"] is not None:
        return frozenset({found["name"]}) & frozenset(planned)
    return frozenset(planned)


# The size of the allocation that failed, as ORT's arena words it (bfc_arena.cc: "Failed to allocate memory
# for requested buffer of size N", "... smaller than requested bytes of N") and torch ("Tried to allocate").
_ALLOCATION = re.compile(
    r"(?:requested buffer of size|requested bytes of|Tried to allocate) ([\d.]+) ?([KMGT]iB|B|bytes)?"
)
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# A kernel that failed because the device did (not because of the request's values), as ORT's CUDA EP
# words it (cuda_call.cc: "CUDA failure N", "CUBLAS failure", "CUDNN failure", "CUDA error cudaError...").
_DEVICE_FAILURE = re.compile(
    r"\b(CUDA|CUBLAS|CUDNN|CUDNN_FE|CUFFT|CURAND|NCCL) (failure|error)", re.IGNORECASE
)


# run_with_iobinding drops ORT's status code (onnxruntime_pybind_state.cc throws std::runtime_error("Error in
# execution: " + message)), so a kernel's failure is known by the executor's words (sequential_executor.cc).
_KERNEL_FAILURE = re.compile(r"Non-zero status code returned while running \w+ node")


def _failed_allocation_bytes(message: str) -> int | None:
    match = _ALLOCATION.search(message)
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS.get(match.group(2) or "", 1))


def _is_out_of_memory(error: Exception) -> bool:
    message = str(error)
    torch = sys.modules.get("torch")  # a runner on numpy never imports it, and then raises none of its errors
    return (
        isinstance(error, MemoryError)
        or (torch is not None and isinstance(error, torch.cuda.OutOfMemoryError))
        or "out of memory" in message.lower()
        or _ALLOCATION.search(message) is not None
    )


def device_memory_bytes(placement: Placement) -> int:
    """All the memory of the device a runner computes on: what no request may exceed on its own."""
    if placement.is_cuda:
        import torch

        return int(torch.cuda.get_device_properties(placement.device_id).total_memory)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def classify_failure(error: Exception, capacity_bytes: int) -> TritonOrtError:
    """One request's failure (it ran alone, after validation) as the library error that says whose it is."""
    if isinstance(error, TritonOrtError):
        return error
    if _is_out_of_memory(error):
        needed = _failed_allocation_bytes(str(error))
        if needed is not None and needed > capacity_bytes:
            return InputError(
                f"this request needs a buffer of {needed} bytes, more than the device's {capacity_bytes} "
                f"bytes; send fewer rows or values that need less memory ({error})"
            )
        return Unavailable(f"device memory is exhausted by the current load; retry later ({error})")
    if isinstance(error, ort_status.InvalidArgument):
        return InputError(f"the model refused this request's inputs: {error}")
    message = str(error)
    if _KERNEL_FAILURE.search(message) and not _DEVICE_FAILURE.search(message):
        # ORT_ENFORCE inside a kernel (a broadcast of unequal axes, a Reshape that cannot fit, an index out of
        # range) fails the run; the request passed validation and ran alone, so its values caused it.
        return InputError(f"the model could not compute this request's values: {error}")
    return InferenceError(f"inference failed on the server: {type(error).__name__}: {error}")
