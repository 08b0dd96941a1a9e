"""Request gathering: the requests of one execute() become one ORT run where their shapes allow it.

Requests whose inputs agree on everything but the batch (first) axis are concatenated on the device, run
once, and the outputs split back per request. A request that cannot join a group runs alone, and so does
every request of a group whose joint run failed, so one bad request never fails its neighbours.

Overridable inputs (an ONNX initializer that a request may replace, runner.py) take part as follows, so
that no request's answer uses a value it did not send: requests join a group only with requests that send
the same inputs (a request that leaves one out runs with the file's default, and so does its group); one
with a batch axis is concatenated like any input; one without (`shared_inputs`: one value for all the rows
of a run) is part of the group key by value, so only requests that send equal values (the same bytes)
share a run, which gets that value once.

Whether a model's requests are gathered at all is the model plan's decision (parameter gather_requests; a
graph that mixes rows across the batch axis runs them one per ORT run: row_mixing.py).

A request that fails alone is classified (`classify_failure`): what its own tensors caused is the client's
(`InputError`), a device short of memory for now is `Unavailable`, anything else is the server's
(`InferenceError`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from .errors import InferenceError, InputError, TritonOrtError, Unavailable
from .session import Placement

LOGGER = logging.getLogger(__name__)

Tensors = Mapping[str, torch.Tensor]
Result = dict[str, torch.Tensor] | Exception


class BatchRunner(Protocol):
    """What gathering needs of a runner: an IOBindingRunner, or one with hooks around it (hooks.py). Two
    steps: `check` each request on its own, then `run_batch` for each run (one request, or a group of them,
    which the runner concatenates itself)."""

    outputs_follow_batch: bool
    placement: Placement
    shared_inputs: frozenset[str]
    """Inputs that hold one value for all the rows of a run: never concatenated."""

    def check(self, tensors: Tensors) -> None:
        """Raise InputError when a request's tensors do not fit the runner's inputs."""
        ...

    def run_batch(self, requests: Sequence[Tensors]) -> dict[str, torch.Tensor]:
        """One run of checked requests: one request's tensors, or several concatenated along axis 0."""
        ...


def _value(tensor: torch.Tensor | np.ndarray[Any, Any]) -> bytes:
    """A tensor's bytes: equal bytes, equal answers (NaN included). One copy to the host for a device
    tensor; only the small inputs that hold one value per run are keyed so. A string input arrives as a
    numpy object array, keyed by its values' text."""
    if isinstance(tensor, np.ndarray):
        return repr(tensor.ravel().tolist()).encode()
    return bytes(tensor.reshape(-1).view(torch.uint8).cpu().numpy().tobytes())


def _group_key(tensors: Tensors, shared: frozenset[str]) -> tuple[object, ...] | None:
    """What requests must share to be concatenated along axis 0 (names, dtypes, the other axes, and the
    value of each shared input); None when this one cannot join any group (a scalar input, inputs of
    different batch sizes, or no batched input)."""
    rows = None
    key: list[object] = []
    for name, tensor in sorted(tensors.items()):
        shape = tensor.shape
        if name in shared:
            key.append((name, tensor.dtype, shape, _value(tensor)))
            continue
        if not shape or (rows is not None and shape[0] != rows):
            return None
        rows = shape[0]
        key.append((name, tensor.dtype, shape[1:]))  # torch.Size is a tuple: hashable as it is
    return tuple(key) if rows is not None else None


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
    return (
        isinstance(error, torch.cuda.OutOfMemoryError | MemoryError)
        or "out of memory" in message.lower()
        or _ALLOCATION.search(message) is not None
    )


def device_memory_bytes(runner: BatchRunner) -> int:
    """All the memory of the device the runner computes on: what no request may exceed on its own."""
    if runner.placement.is_cuda:
        return int(torch.cuda.get_device_properties(runner.placement.device_id).total_memory)
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
    if isinstance(error, ort_errors.InvalidArgument):
        return InputError(f"the model refused this request's inputs: {error}")
    message = str(error)
    if _KERNEL_FAILURE.search(message) and not _DEVICE_FAILURE.search(message):
        # ORT_ENFORCE inside a kernel (a broadcast of unequal axes, a Reshape that cannot fit, an index out of
        # range) fails the run; the request passed validation and ran alone, so its values caused it.
        return InputError(f"the model could not compute this request's values: {error}")
    return InferenceError(f"inference failed on the server: {type(error).__name__}: {error}")


def run_one(runner: BatchRunner, tensors: Tensors) -> Result:
    """One checked request; any failure becomes that request's classified error instead of an exception."""
    try:
        return runner.run_batch((tensors,))
    except Exception as error:
        return classify_failure(error, device_memory_bytes(runner))


def _run_gathered(runner: BatchRunner, group: Sequence[Tensors]) -> list[Result] | None:
    """One ORT run for the whole group, split back; None when it cannot be split or failed."""
    batched = [name for name in group[0] if name not in runner.shared_inputs]
    rows = [tensors[batched[0]].shape[0] for tensors in group]
    total = sum(rows)
    try:  # the joint inputs too may not fit (device memory): then each request runs, and fails, alone
        outputs = runner.run_batch(group)  # its members were checked one by one
    except Exception as error:
        LOGGER.info("gathered run of %d requests failed (%s); running them one by one", len(group), error)
        return None
    if any(t.dim() == 0 or t.shape[0] != total for t in outputs.values()):
        return None  # an output without a batch axis cannot be split per request
    pieces = {name: torch.split(t, rows) for name, t in outputs.items()}
    return [{name: pieces[name][i] for name in outputs} for i in range(len(group))]


def run_requests(runner: BatchRunner, requests: Sequence[Tensors], gather: bool) -> list[Result]:
    """Results in request order: a dict of output tensors, or the request's error."""
    if len(requests) == 1:  # the common case at low load: nothing to group
        try:
            runner.check(requests[0])
        except InputError as error:
            return [error]
        return [run_one(runner, requests[0])]
    results: list[Result | None] = [None] * len(requests)
    groups: dict[object, list[int]] = {}
    for index, tensors in enumerate(requests):
        try:
            runner.check(tensors)
        except InputError as error:
            results[index] = error
            continue
        key = _group_key(tensors, runner.shared_inputs) if gather and runner.outputs_follow_batch else None
        groups.setdefault(("alone", index) if key is None else key, []).append(index)
    for members in groups.values():
        gathered = _run_gathered(runner, [requests[i] for i in members]) if len(members) > 1 else None
        for position, index in enumerate(members):
            results[index] = gathered[position] if gathered else run_one(runner, requests[index])
    return [result if result is not None else InferenceError("request was not run") for result in results]
