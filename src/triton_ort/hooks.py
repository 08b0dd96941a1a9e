"""Pre- and post-processing hooks: Python that runs around the ONNX model inside the same execute().

A model may ship a Python module beside its ONNX file (config.pbtxt parameter `hooks: "hooks.py"`, a path
relative to the version directory) that defines either or both of

    def preprocess(inputs: Tensors) -> Tensors: ...            # client inputs -> the session's inputs
    def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors: ...   # session outputs -> client outputs

on dicts of torch tensors. They run on the instance's device and CUDA stream, once per ORT run: on the
gathered batch when several requests of one execute() are concatenated, on one request when it runs alone.
What they return is checked (preprocess's against the ONNX file's inputs, postprocess's against
config.pbtxt's outputs), and every failure names the hook (module path and function).

`HookedRunner` puts the hooks around an `IOBindingRunner` behind the same interface that request gathering
uses, so gathering, splitting and the one-by-one fallback stay in one place (gather.py) and a model without
hooks runs exactly as before: the model plan builds a HookedRunner only when a hooks module is configured.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .arrays import concatenate
from .dtypes import from_triton_type
from .errors import ConfigError, InputError, TritonOrtError
from .hook_tensors import HookTensors, read_declarations
from .output_placement import OutputPlacement
from .run_plans import BoundedSet
from .runner import IOBindingRunner
from .served_config import ConfigTensor, ServedConfig
from .signature import Dim, TensorSpec
from .tensor_checks import Signature, check_against_specs, signature_of

Tensors = dict[str, torch.Tensor]
"""Tensors by name: what hooks take and return."""


class Preprocess(Protocol):
    """`preprocess(inputs) -> inputs`: the client's tensors (one request, or a gathered batch) in, the
    ONNX session's inputs out. Raise `triton_ort.InputError` to reject the request as the client's fault."""

    def __call__(self, inputs: Tensors, /) -> Tensors: ...


class Postprocess(Protocol):
    """`postprocess(outputs, inputs) -> outputs`: the session's outputs and the client's inputs (the
    same tensors preprocess saw) in, the outputs config.pbtxt declares out, batch axis first."""

    def __call__(self, outputs: Tensors, inputs: Tensors, /) -> Tensors: ...


class HookError(TritonOrtError):
    """A hook raised, or returned something that does not fit: the model's fault, not the client's."""


@dataclass(frozen=True)
class ClientSpecs:
    """config.pbtxt's inputs and outputs: what clients send and receive when hooks sit in between."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batched: bool  # max_batch_size > 0: every tensor has a leading batch axis
    optional: tuple[TensorSpec, ...] = ()
    """Inputs a request may leave out (`optional: true`): preprocess gets only what was sent."""

    @classmethod
    def from_config(cls, config: ServedConfig) -> ClientSpecs:
        batch: tuple[Dim, ...] = ("batch",) if config.batched else ()

        def specs(kind: str, entries: Sequence[ConfigTensor]) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(
                    name=entry.name,
                    element_type=from_triton_type(entry.data_type, f"config {kind} {entry.name!r}"),
                    shape=batch + tuple(None if d < 0 else d for d in entry.dims),
                )
                for entry in entries
            )

        required = [entry for entry in config.inputs if not entry.optional]
        optional = [entry for entry in config.inputs if entry.optional]
        return cls(
            specs("input", required),
            specs("output", config.outputs),
            config.batched,
            specs("input", optional),
        )


def _describe(value: object) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {type(v).__name__}" for k, v in value.items()) + "}"
    return type(value).__name__


@dataclass(frozen=True)
class Hooks:
    """The hook functions of one model, loaded from its hooks module."""

    path: Path
    preprocess: Preprocess | None
    postprocess: Postprocess | None
    declared: HookTensors | None = None
    """The client tensors the module declares (INPUTS, OUTPUTS: triton_ort.hook_tensors), None without."""

    def name(self, function: str) -> str:
        """How messages name a hook: module path and function."""
        return f"{self.path}:{function}"

    @classmethod
    def load(cls, path: Path) -> Hooks:
        """Import the module at `path`; ConfigError names the file and what is wrong with it."""
        if not path.is_file():
            raise ConfigError(
                f"parameter 'hooks': {path} does not exist (the path is relative to the version directory)"
            )
        # A name of its own per file: two models' hooks.py must not replace each other in sys.modules.
        module_name = f"triton_ort_hooks_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(
                f"parameter 'hooks': {path} cannot be imported as a Python module (expected a .py file)"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[module_name]
            raise ConfigError(
                f"hooks module {path} failed to import: {type(error).__name__}: {error}"
            ) from error
        hooks = cls(
            path,
            getattr(module, "preprocess", None),
            getattr(module, "postprocess", None),
            read_declarations(module, path),
        )
        if hooks.preprocess is None and hooks.postprocess is None:
            raise ConfigError(
                f"hooks module {path} defines neither preprocess(inputs) nor postprocess(outputs, inputs)"
            )
        hooks._check_arity("preprocess", 1)
        hooks._check_arity("postprocess", 2)
        return hooks

    def _check_arity(self, function: str, arguments: int) -> None:
        hook = getattr(self, function)
        if hook is None:
            return
        usage = "preprocess(inputs)" if arguments == 1 else "postprocess(outputs, inputs)"
        try:
            inspect.signature(hook).bind(*range(arguments))
        except TypeError:
            raise ConfigError(f"hook {self.name(function)} must be callable as {usage}") from None
        except ValueError:  # a builtin without a signature: let the first call tell
            pass


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
    ) -> None:
        self.runner = runner
        self.hooks = hooks
        self.client = client
        # Where the final outputs go on a CUDA instance. The runner itself keeps its outputs on the
        # device for postprocess (ModelInstance builds it so), and this applies the configured placement
        # to what postprocess returns.
        self.output_placement = output_placement
        # Gathered requests are split along axis 0 of what postprocess returns, which check_outputs holds
        # to the request's rows: that needs config outputs with a batch axis.
        self.outputs_follow_batch = client.batched
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
        staged_before = self.runner.stats.host_to_device_copies
        if len(requests) == 1:
            inputs = {name: self.runner.to_device(t) for name, t in requests[0].items()}
        else:  # the session reads what preprocess returns, so no buffer of the runner's is written here
            inputs = concatenate(self.runner.arrays, requests, self.shared_inputs, {})
        model_inputs = inputs
        if self.hooks.preprocess is not None:
            model_inputs = _call(self._preprocess_name, self.hooks.preprocess, dict(inputs))
            self._check_model_inputs(model_inputs)
        else:
            self.runner.check(model_inputs)
        # The runner sees only what it stages itself: a concatenation, staging here, or preprocess's
        # kernels also queued the model's inputs on the stream just now.
        queued = (
            len(requests) > 1
            or self.hooks.preprocess is not None
            or self.runner.stats.host_to_device_copies != staged_before
        )
        outputs = self.runner.run_checked(model_inputs, queued)
        if self.hooks.postprocess is not None:
            outputs = _call(self._postprocess_name, self.hooks.postprocess, outputs, inputs)
        else:  # the ONNX file may have outputs that config.pbtxt does not serve
            outputs = {spec.name: outputs[spec.name] for spec in self.client.outputs if spec.name in outputs}
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
        self.runner.stats.host_output_runs += 1
        moved = {}
        for name, tensor in placed.items():
            if tensor.device.type == "cuda":
                # non_blocking to the host allocates the destination in pinned memory (torch's
                # CachingHostAllocator), so the copy is queued on the stream and not waited for here.
                moved[name] = tensor.to("cpu", non_blocking=True)
                self.runner.stats.device_to_host_copies += 1
            else:
                moved[name] = tensor
        return moved


def _rows(tensors: Mapping[str, torch.Tensor]) -> int:
    return int(next(iter(tensors.values())).shape[0])
