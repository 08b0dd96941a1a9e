"""Request gathering: the requests of one execute() become one ORT run where their shapes allow it.

Requests whose inputs agree on everything but the batch (first) axis are concatenated on the device, run
once, and the outputs split back per request (views of the joint output: torch tensors or numpy arrays,
whichever the runner binds, arrays.py). A request that cannot join a group runs alone, and so does
every request of a group whose joint run failed, so one bad request never fails its neighbours.

Overridable inputs (an ONNX initializer that a request may replace, runner.py) take part as follows, so
that no request's answer uses a value it did not send: requests join a group only with requests that send
the same inputs (a request that leaves one out runs with the file's default, and so does its group); one
with a batch axis is concatenated like any input; one without (`shared_inputs`: one value for all the rows
of a run) is part of the group key by value, so only requests that send equal values (the same bytes)
share a run, which gets that value once.

Whether a model's requests are gathered at all is the model plan's decision (parameter gather_requests; a
graph that mixes rows across the batch axis runs them one per ORT run: row_mixing.py).

A request that fails alone is classified (ort_errors.classify_failure): what its own tensors caused is the
client's (`InputError`), a device short of memory for now is `Unavailable`, anything else is the server's
(`InferenceError`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import InferenceError, InputError
from ..model.signature import Tensors
from .ort_errors import classify_failure, device_memory_bytes
from .session import Placement

LOGGER = logging.getLogger(__name__)

Result = dict[str, Any] | Exception
"""A request's answer (its outputs by name) or its error."""


class BatchRunner(Protocol):
    """What gathering needs of a runner: an IOBindingRunner, or one with hooks around it (hooked_runner.py).
    Two steps: `check` each request on its own, then `run_batch` for each run (one request, or a group of
    them, which the runner concatenates itself)."""

    outputs_follow_batch: bool
    placement: Placement
    shared_inputs: frozenset[str]
    """Inputs that hold one value for all the rows of a run: never concatenated."""

    def check(self, tensors: Tensors) -> None:
        """Raise InputError when a request's tensors do not fit the runner's inputs."""
        ...

    def run_batch(self, requests: Sequence[Tensors]) -> dict[str, Any]:
        """One run of checked requests: one request's tensors, or several concatenated along axis 0."""
        ...


def _value(tensor: Any) -> bytes:
    """A tensor's bytes: equal bytes, equal answers (NaN included). One copy to the host for a device
    tensor; only the small inputs that hold one value per run are keyed so. A string input arrives as a
    numpy object array, keyed by its values' text."""
    if isinstance(tensor, np.ndarray):
        if tensor.dtype.kind in "OSU":
            return repr(tensor.ravel().tolist()).encode()
        return tensor.tobytes()
    import torch

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


def request_rows(tensors: Tensors, shared: frozenset[str] = frozenset()) -> int:
    """A request's batch rows: the first axis of its first input that is not `shared` (one value for all
    the rows of a run), 0 for scalars or no inputs; what the metrics count, the in-flight scheduler fills
    a run with, and a gathered run's outputs are split by."""
    for name, tensor in tensors.items():
        if name not in shared:
            return int(tensor.shape[0]) if len(tensor.shape) > 0 else 0  # torch, or numpy for strings
    return 0


def run_one(runner: BatchRunner, tensors: Tensors) -> Result:
    """One checked request; any failure becomes that request's classified error instead of an exception."""
    try:
        return runner.run_batch((tensors,))
    except Exception as error:
        return classify_failure(error, device_memory_bytes(runner.placement))


def _run_gathered(runner: BatchRunner, group: Sequence[Tensors]) -> list[dict[str, Any]] | None:
    """One ORT run for the whole group, split back; None when it cannot be split or failed."""
    try:  # the joint inputs too may not fit (device memory): then each request runs, and fails, alone
        outputs = runner.run_batch(group)  # its members were checked one by one
    except Exception as error:
        LOGGER.info("gathered run of %d requests failed (%s); running them one by one", len(group), error)
        return None
    # an output without a batch axis cannot be split per request
    return split_rows(outputs, [request_rows(tensors, runner.shared_inputs) for tensors in group])


def _run_groups_together(
    runner: BatchRunner, requests: Sequence[Tensors], groups: list[list[int]], results: list[Result | None]
) -> bool:
    """Groups that differ in shape in one ORT run, where the runner can make them agree (a hooked runner
    whose preprocess resizes: HookedRunner.run_groups). Fills `results` and says True when it ran; False
    when the runner cannot (the groups then run apart, as does every group after a failure here)."""
    run_groups = getattr(runner, "run_groups", None)
    if run_groups is None:
        return False
    try:
        outputs = run_groups([[requests[i] for i in members] for members in groups])
    except Exception as error:
        LOGGER.info("joint run of %d groups failed (%s); running them apart", len(groups), error)
        return False
    if outputs is None:
        return False
    for members, group_outputs in zip(groups, outputs, strict=True):
        if len(members) == 1:
            results[members[0]] = group_outputs
            continue
        split = split_rows(group_outputs, [request_rows(requests[i], runner.shared_inputs) for i in members])
        if split is None:
            return False
        for index, answer in zip(members, split, strict=True):
            results[index] = answer
    return True


def split_rows(outputs: Mapping[str, Any], rows: list[int]) -> list[dict[str, Any]] | None:
    """A joint run's outputs back per request; None when an output has no batch axis of that total."""
    total = sum(rows)
    if any(len(t.shape) == 0 or t.shape[0] != total for t in outputs.values()):
        return None
    starts = [sum(rows[:i]) for i in range(len(rows) + 1)]
    return [{name: t[starts[i] : starts[i + 1]] for name, t in outputs.items()} for i in range(len(rows))]


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
    # only where the plan gathers: a graph that mixes rows runs its requests apart (gather_requests)
    if gather and len(groups) > 1 and _run_groups_together(runner, requests, list(groups.values()), results):
        return [result if result is not None else InferenceError("request was not run") for result in results]
    for members in groups.values():
        gathered = _run_gathered(runner, [requests[i] for i in members]) if len(members) > 1 else None
        for position, index in enumerate(members):
            results[index] = gathered[position] if gathered else run_one(runner, requests[index])
    return [result if result is not None else InferenceError("request was not run") for result in results]
