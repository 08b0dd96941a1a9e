"""Request gathering: the requests of one execute() become one ORT run where their shapes allow it.

Requests whose inputs agree on everything but the batch (first) axis are concatenated on the device, run
once, and the outputs split back per request. A request that cannot join a group runs alone, and so does
every request of a group whose joint run failed, so one bad request never fails its neighbours.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from .errors import InputError, TritonOrtError

LOGGER = logging.getLogger(__name__)

Tensors = Mapping[str, torch.Tensor]
Result = dict[str, torch.Tensor] | Exception


class Runs(Protocol):
    """What gathering needs of a runner: an IOBindingRunner, or one with hooks around it (hooks.py)."""

    outputs_follow_batch: bool

    def validate(self, tensors: Tensors) -> None: ...

    def run(self, tensors: Tensors, validated: bool = False) -> dict[str, torch.Tensor]: ...

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor: ...


def _group_key(tensors: Tensors) -> tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]:
    return tuple((name, t.dtype, tuple(t.shape[1:])) for name, t in sorted(tensors.items()))


def run_one(runner: Runs, tensors: Tensors) -> Result:
    """One validated request; any failure becomes that request's error instead of an exception."""
    try:
        return runner.run(tensors, validated=True)
    except InputError as error:
        return error
    except TritonOrtError as error:  # e.g. a hook's failure, which names the hook
        return error
    except torch.cuda.OutOfMemoryError as error:
        return InputError(f"request needs more device memory than is free: {error}")
    except Exception as error:  # ORT raises plain RuntimeError-like errors for bad shapes/values
        return InputError(f"inference failed: {error}")


def _run_gathered(runner: Runs, group: Sequence[Tensors]) -> list[Result] | None:
    """One ORT run for the whole group, split back; None when it cannot be split or failed."""
    rows = [next(iter(tensors.values())).shape[0] for tensors in group]
    joint = {name: torch.cat([runner.to_device(tensors[name]) for tensors in group]) for name in group[0]}
    try:
        outputs = runner.run(joint, validated=True)  # its members were validated one by one
    except Exception as error:
        LOGGER.info("gathered run of %d requests failed (%s); running them one by one", len(group), error)
        return None
    total = sum(rows)
    if any(t.dim() == 0 or t.shape[0] != total for t in outputs.values()):
        return None  # an output without a batch axis cannot be split per request
    pieces = {name: torch.split(t, rows) for name, t in outputs.items()}
    return [{name: pieces[name][i] for name in outputs} for i in range(len(group))]


def run_requests(runner: Runs, requests: Sequence[Tensors], gather: bool) -> list[Result]:
    """Results in request order: a dict of output tensors, or the request's error."""
    if len(requests) == 1:  # the common case at low load: nothing to group
        try:
            runner.validate(requests[0])
        except InputError as error:
            return [error]
        return [run_one(runner, requests[0])]
    results: list[Result | None] = [None] * len(requests)
    groups: dict[object, list[int]] = {}
    for index, tensors in enumerate(requests):
        try:
            runner.validate(tensors)
        except InputError as error:
            results[index] = error
            continue
        batched = (
            runner.outputs_follow_batch
            and all(t.dim() > 0 for t in tensors.values())
            and len({t.shape[0] for t in tensors.values()}) == 1  # one batch size across its inputs
        )
        key = _group_key(tensors) if gather and batched else ("alone", index)
        groups.setdefault(key, []).append(index)
    for members in groups.values():
        gathered = _run_gathered(runner, [requests[i] for i in members]) if len(members) > 1 else None
        for position, index in enumerate(members):
            results[index] = gathered[position] if gathered else run_one(runner, requests[index])
    return [result if result is not None else InputError("request was not run") for result in results]
