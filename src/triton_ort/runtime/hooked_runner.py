"""The runner with a model's hooks around it (hooks/module.py: the hooks' contract and loading).

The hooks run on the instance's device and CUDA stream, once per ORT run: on the gathered batch when several
requests of one execute() are concatenated, on one request when it runs alone. What they return is checked
(preprocess's against the ONNX file's inputs, postprocess's against config.pbtxt's outputs), and every
failure names the hook (module path and function).

`HookedRunner` puts the hooks around an `IOBindingRunner` behind the same interface that request gathering
uses, so gathering, splitting and the one-by-one fallback stay in one place (gather.py) and a model without
hooks runs exactly as before: the model plan builds a HookedRunner only when a hooks module is configured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..errors import InferenceError, InputError
from ..hooks.module import ClientSpecs, HookError, Hooks
from ..model.signature import Tensors
from .arrays import concatenate
from .gather import split_rows
from .output_placement import OutputPlacement, copy_to_host
from .run_plan import BoundedSet
from .runner import IOBindingRunner
from .tensor_checks import Signature, check_against_specs, served_outputs, signature_of


def _describe(value: object) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {type(v).__name__}" for k, v in value.items()) + "}"
    return type(value).__name__


def _call(name: str, hook: Callable[..., Any], *arguments: Tensors) -> Any:
    """Run a hook; what it raises becomes that request's error, naming the hook."""
    try:
        return hook(*arguments)
    except InputError as error:  # the hook's own verdict on the client's tensors
        raise InputError(f"{name} rejected the request: {error}") from error
    except torch.cuda.OutOfMemoryError:  # the device's state, not the hook's bug: classified as the runner's
        raise
    except Exception as error:
        raise HookError(f"{name} raised {type(error).__name__}: {error}") from error


def _all_tensors(value: Any) -> bool:
    """A dict of tensors, which a signature can be taken of (a hook may return anything)."""
    return isinstance(value, Mapping) and all(isinstance(t, torch.Tensor) for t in value.values())


class HookedRunner:
    """An IOBindingRunner with hooks around each run, behind the interface request gathering uses
    (gather.BatchRunner: check, run_batch, outputs_follow_batch). The checks of what the hooks return are
    cached per tensor signature, as the runner caches its own."""

    def __init__(
        self,
        runner: IOBindingRunner,
        hooks: Hooks,
        client: ClientSpecs,
        output_placement: OutputPlacement,
        outputs_follow_batch: bool,
        gather_after_preprocess: bool | None = None,
    ) -> None:
        """Made by the model plan (plan.batch_runner), which decides `outputs_follow_batch`."""
        self.runner = runner
        self.hooks = hooks
        self.client = client
        # Where the final outputs go on a CUDA instance. The runner itself keeps its outputs on the
        # device for postprocess (plan.runner_output_placement), and this applies the configured placement
        # to what postprocess returns.
        self.output_placement = output_placement
        # Gathered requests are split along axis 0 of what postprocess returns, which check_outputs holds
        # to the request's rows: that needs config outputs with a batch axis.
        self.outputs_follow_batch = outputs_follow_batch
        self._served_names = tuple(spec.name for spec in client.outputs)
        # The client's tensors are config.pbtxt's: every one has the batch axis and is concatenated.
        self.shared_inputs: frozenset[str] = frozenset()
        self.placement = runner.placement  # where the session computes (gathering sizes failures by it)
        # Per execute this class adds two calls and a few cached checks; everything that can be is
        # computed here once (docs/benchmarks.md, "Hooks").
        self._preprocess_name = hooks.name("preprocess")
        self._postprocess_name = hooks.name("postprocess")
        self._outputs_source = (
            self._postprocess_name
            if hooks.postprocess is not None
            else f"the ONNX model (no postprocess in {hooks.path})"
        )
        self._on_cuda = runner.placement.is_cuda
        # run_groups: `auto` (None) on CPU instances only; on a GPU it has not run on the GPU host yet
        self.groups_together = (
            not self._on_cuda if gather_after_preprocess is None else gather_after_preprocess
        )
        self._checked_client_inputs: BoundedSet[Signature] = BoundedSet()
        self._checked_model_inputs: BoundedSet[Signature] = BoundedSet()
        self._checked_outputs: BoundedSet[tuple[int | None, Signature] | None] = BoundedSet()

    def check(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """The client's tensors against config.pbtxt's inputs (the ONNX file's are preprocess's business)."""
        signature = signature_of(tensors)
        if signature not in self._checked_client_inputs:
            check_against_specs(self.client.inputs, tensors, "input", self.client.optional)
            self._checked_client_inputs.keep(signature)

    def run_batch(self, requests: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """One run of checked requests (several are concatenated first), with the hooks around it."""
        inputs, staged = self._client_inputs(requests)
        model_inputs = inputs
        if self.hooks.preprocess is not None:
            model_inputs = _call(self._preprocess_name, self.hooks.preprocess, dict(inputs))
            self._check_model_inputs(model_inputs)
        else:
            self.runner.check(model_inputs)
        # The runner sees only what it stages itself: staging here (a staged input is a new tensor: a copy,
        # or the concatenation), or preprocess's kernels also queued the model's inputs on the stream.
        queued = staged or self.hooks.preprocess is not None
        return self._finish(self.runner.run_checked(model_inputs, queued), inputs)

    def run_groups(
        self, groups: Sequence[Sequence[Mapping[str, torch.Tensor]]]
    ) -> list[dict[str, torch.Tensor]] | None:
        """Groups of checked requests whose client tensors differ beyond the batch axis (images of several
        sizes) in ONE ORT run: preprocess runs per group (each group as run_batch concatenates it), and
        where what it returns agrees on all but the batch axis (the images resized to the model's size),
        those are concatenated and run once; postprocess then runs per group, on that group's rows of the
        outputs and its own inputs. None when there is no preprocess or its results do not agree: each
        group then runs on its own (gather.py). A failure raises: gathering then runs the groups apart,
        so one group's bad request never fails another's."""
        if not self.groups_together or self.hooks.preprocess is None:
            return None
        if not self.client.batched or not self.outputs_follow_batch:
            return None
        client_inputs = [self._client_inputs(group)[0] for group in groups]
        model_inputs = []
        for inputs in client_inputs:
            returned = _call(self._preprocess_name, self.hooks.preprocess, dict(inputs))
            self._check_model_inputs(returned)
            model_inputs.append(returned)
        agreed = {_beyond_batch(m) for m in model_inputs}
        if len(agreed) != 1 or None in agreed:
            return None
        rows = [_rows(m) for m in model_inputs]
        joint = {name: torch.cat([m[name] for m in model_inputs]) for name in model_inputs[0]}
        outputs = self.runner.run_checked(joint, True)  # preprocess and the concatenation queued them
        parts = split_rows(outputs, rows)
        if parts is None:
            raise InferenceError(
                f"the ONNX model's outputs do not have the {sum(rows)} rows of the joint run"
            )
        return [self._finish(part, inputs) for part, inputs in zip(parts, client_inputs, strict=True)]

    def _client_inputs(self, requests: Sequence[Mapping[str, torch.Tensor]]) -> tuple[Tensors, bool]:
        """One request's tensors on the device, or several concatenated; and whether they were staged (a new
        tensor: a copy or the concatenation)."""
        if len(requests) == 1:
            inputs = {name: self.runner.to_device(t) for name, t in requests[0].items()}
            return inputs, any(inputs[name] is not t for name, t in requests[0].items())
        # the session reads what preprocess returns, so no buffer of the runner's is written here
        return concatenate(self.runner.arrays, requests, self.shared_inputs, {}), True

    def _finish(self, outputs: Mapping[str, torch.Tensor], inputs: Tensors) -> dict[str, torch.Tensor]:
        """postprocess (or the served outputs), checked, and placed."""
        if self.hooks.postprocess is not None:
            outputs = _call(self._postprocess_name, self.hooks.postprocess, outputs, inputs)
        else:  # the ONNX file may have outputs that config.pbtxt does not serve
            outputs = served_outputs(outputs, self._served_names)
        self._check_outputs(outputs, rows=_rows(inputs) if self.client.batched else None)
        return self._place(outputs)

    def _check_model_inputs(self, model_inputs: Any) -> None:
        if _all_tensors(model_inputs) and signature_of(model_inputs) in self._checked_model_inputs:
            return
        try:
            if not _all_tensors(model_inputs):
                raise InputError(f"expected a dict of str -> torch.Tensor, got {_describe(model_inputs)}")
            self.runner.check(model_inputs)
        except InputError as error:
            raise HookError(
                f"{self._preprocess_name} returned tensors that do not fit the ONNX model: {error}"
            ) from error
        self._checked_model_inputs.keep(signature_of(model_inputs))

    def _check_outputs(self, outputs: Any, rows: int | None) -> None:
        # The rows are part of the key: the same output shapes can be right for one batch, wrong for another.
        key = (rows, signature_of(outputs)) if _all_tensors(outputs) else None
        if key in self._checked_outputs:
            return
        try:
            if not _all_tensors(outputs):
                raise InputError(f"expected a dict of str -> torch.Tensor, got {_describe(outputs)}")
            check_against_specs(self.client.outputs, outputs, "output")
            if rows is not None:
                for name, tensor in outputs.items():
                    if tensor.shape[0] != rows:
                        raise InputError(
                            f"{name!r} has {tensor.shape[0]} rows on its batch axis for a batch of {rows}"
                        )
        except InputError as error:
            raise HookError(
                f"{self._outputs_source} returned outputs that do not fit config.pbtxt: {error}"
            ) from error
        self._checked_outputs.keep(key)

    def _place(self, outputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Contiguous (Triton takes only C-order DLPack tensors), and on the host where the output
        placement says so: one asynchronous copy into pinned memory each, complete at the stream sync."""
        placed = {name: t if t.is_contiguous() else t.contiguous() for name, t in outputs.items()}
        if not self._on_cuda:
            return placed
        total = None
        if self.output_placement.reads_sizes:
            total = sum(math.prod(t.shape) * t.element_size() for t in placed.values())
        if not self.output_placement.to_host(total):
            return placed
        return copy_to_host(placed, {}, self.runner.stats)


def _beyond_batch(tensors: Mapping[str, torch.Tensor]) -> tuple[object, ...] | None:
    """What model inputs must share to be concatenated along axis 0 (names, dtypes, devices, the other
    axes); None when they have no common batch axis."""
    if any(t.dim() == 0 for t in tensors.values()) or len({t.shape[0] for t in tensors.values()}) != 1:
        return None
    return tuple(sorted((name, t.dtype, t.device, tuple(t.shape[1:])) for name, t in tensors.items()))


def _rows(tensors: Mapping[str, torch.Tensor]) -> int:
    return int(next(iter(tensors.values())).shape[0])
