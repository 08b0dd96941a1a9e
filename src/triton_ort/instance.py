"""One served model instance, everything model.py needs, and nothing that imports Triton."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cuda_context import lower_stack_limit
from .errors import InferenceError, InputError, ProviderError
from .gather import Result, Runs, run_requests
from .hooks import ClientSpecs, HookedRunner
from .load_checks import check_python_backend_types, check_tensors, checked_options, load_hooks
from .metrics import InstanceMetrics, request_rows
from .options import ModelOptions
from .row_mixing import row_mixing_in_file
from .runner import IOBindingRunner, OutputPlacement
from .served_config import ServedConfig
from .session import Placement, create_session
from .signature import Dim, TensorSpec
from .stats import ExecuteStats

LOGGER = logging.getLogger(__name__)


def _new_stream(device_id: int) -> torch.cuda.Stream:
    """The stream this instance computes on: torch's copies and ORT's kernels are both queued on it.

    The instance's device also becomes this process's current device (the python backend runs one stub
    process per instance). Otherwise CUDA device 0 stays current, and the first call that switches back to
    it creates a CUDA context there (cudaSetDevice initialises the primary context since CUDA 12): leaving
    `torch.cuda.stream(...)` restores the previous device's stream through torch.cuda.set_stream, which
    sets that device. Measured on a 2-GPU host: 518-770 MiB on GPU 0 per stub serving GPU 1
    (docs/kubernetes.md, "Several GPUs per pod").
    """
    if not torch.cuda.is_available():
        raise ProviderError(
            f"this is a GPU instance (device {device_id}) but torch sees no CUDA device "
            f"(torch {torch.__version__}); install a CUDA build of torch in the python backend's environment"
        )
    if device_id >= torch.cuda.device_count():
        raise ProviderError(
            f"this GPU instance is for device {device_id}, but this process sees "
            f"{torch.cuda.device_count()} CUDA device(s); check instance_group gpus and CUDA_VISIBLE_DEVICES"
        )
    torch.cuda.set_device(device_id)
    return torch.cuda.Stream(device=device_id)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def _on_stream(stream: torch.cuda.Stream) -> Iterator[None]:
    """The instance's device and stream current for the code inside; on leaving, the previous stream is
    restored on this same device, so no other device is ever made current (and given a context)."""
    with torch.cuda.device(stream.device), torch.cuda.stream(stream):
        yield


def _cpu_thread_policy(options: ModelOptions) -> ModelOptions:
    """A CPU instance's ORT pool: a thread per CPU this process may use (a lone request gets them all),
    and no spinning, so that an idle pool leaves those CPUs to the other instances and to the server
    (measured, 2-core machine, demo: c=1 3655 -> 2678 µs against one thread per instance, c=16 the same
    504 req/s; spinning pools lost at both; docs/benchmarks.md, CPU). What the config sets stays. An
    explicit count also keeps ORT from pinning each instance's threads to the same cores, as its own
    default (one per physical core) does."""
    threads = options.intra_op_num_threads or len(os.sched_getaffinity(0))
    spinning = False if options.allow_spinning is None else options.allow_spinning
    return dataclasses.replace(options, intra_op_num_threads=threads, allow_spinning=spinning)


class ModelInstance:
    """Session, IO binding and request gathering for one Triton model instance, built once at load."""

    def __init__(
        self,
        model_config: Mapping[str, Any],
        version_dir: Path,
        instance_kind: str,
        device_id: int,
        metrics: InstanceMetrics | None = None,
        carries_bf16: bool = True,
    ) -> None:
        # The checks that need no session or device come from load_checks, which `triton-ort config`
        # runs offline in the same order: its refusals are the load's.
        config = ServedConfig.parse(model_config)  # read once; every check below takes it
        check_python_backend_types(config, carries_bf16)  # what the python backend probed (model.py)
        self.options: ModelOptions = checked_options(config)
        self.metrics = metrics
        self.max_batch_size = config.max_batch_size
        gpu = instance_kind.upper() == "GPU"
        if not gpu:
            # On CPU, torch only moves and concatenates tensors and ORT's thread pool computes; torch's own
            # pool spinning after each copy competed with ORT's for the cores (measured: 2-core machine,
            # concurrency 16, 313 -> 548 requests/s for the demo; docs/benchmarks.md).
            torch.set_num_threads(1)
        self._stream = _new_stream(device_id) if gpu else None
        if self._stream is not None and self.options.cuda_stack_bytes:
            lower_stack_limit(self.options.cuda_stack_bytes)  # before ORT and warm-up allocate
        placement = (
            Placement("cuda", device_id, self._stream.cuda_stream) if self._stream else Placement("cpu")
        )
        if not gpu:
            self.options = _cpu_thread_policy(self.options)
        hooks = load_hooks(version_dir, self.options)
        session = create_session(version_dir / self.options.onnx_file, self.options, placement)
        output_placement = OutputPlacement(self.options.output_placement, self.options.host_output_max_bytes)
        self.runner = IOBindingRunner(
            session,
            placement,
            pinned_staging=self.options.pinned_staging,
            # With hooks the session's outputs stay on the device for postprocess; the placement then
            # applies to what the hooks hand back.
            output_placement=OutputPlacement("device") if hooks else output_placement,
            cuda_graph=self.options.cuda_graph,
            arena_shrinkage=self.options.arena_shrinkage,
        )
        # What request gathering runs: the runner itself, or (only when a hooks module is configured, so
        # a model without hooks pays nothing for them) the runner with its hooks around it.
        self._pipeline: Runs = self.runner
        self._request_specs: tuple[TensorSpec, ...] = self.runner.inputs
        check_tensors(config, self.runner.inputs, self.runner.outputs, hooks, self.runner.overridable)
        # Overridable inputs of one value per request, as the model takes them (_one_value_inputs).
        self._one_value: dict[str, TensorSpec] = {}
        if hooks is None:
            self._one_value = {
                s.name: s for s in self.runner.overridable if s.name in self.runner.shared_inputs
            }
        else:
            client = ClientSpecs.from_config(config)
            self._pipeline = HookedRunner(self.runner, hooks, client, output_placement)
            self._request_specs = client.inputs
        self.output_names = [entry.name for entry in config.outputs]
        self.gather = self._gathers(version_dir / self.options.onnx_file)
        self.pads_graph_batches = self._pads_graph_batches(version_dir / self.options.onnx_file)
        self.last_execute: ExecuteStats | None = None  # kept only while DEBUG logging is on
        if not self.runner.placement.is_cuda:
            self._stream = None  # the CUDA EP did not load and allow_cpu_fallback let it run on CPU
        self._loaded = False  # warm-up runs are not the clients' executes: metrics start after them
        self._warm_up(self.options.warmup)
        self._loaded = True
        if self.metrics is not None:
            try:
                self.metrics.loaded(self.runner.stats, cpu_fallback=gpu and not self.runner.placement.is_cuda)
            except Exception as error:  # the server refused a metric: serve without them
                LOGGER.warning("custom metrics are off for this instance: %s", error)
                self.metrics = None
        LOGGER.info(
            "loaded %s on %s with providers %s; options %s",
            self.options.onnx_file,
            self.runner.device,
            session.get_providers(),
            self.options,
        )

    def _gathers(self, onnx_path: Path) -> bool:
        """Whether the requests of one execute may share an ORT run: parameter gather_requests, or (auto)
        unless the graph mixes rows across the batch axis, which would make a request's answer depend on
        the requests beside it (row_mixing.py). Said once in the log when it runs them apart."""
        if self.options.gather_requests is not None:
            return self.options.gather_requests
        if not self._pipeline.outputs_follow_batch:
            return True  # such a model's requests never share a run: nothing to check
        return self._rows_independent(
            onnx_path,
            "requests run one per ORT run, not gathered",
            "parameter gather_requests: yes gathers them anyway",
        )

    def _rows_independent(self, onnx_path: Path, consequence: str, override: str) -> bool:
        """Whether the graph never mixes rows across the batch axis (row_mixing.py). Where it does, or
        cannot be read, the log says so once, with the `consequence` and how to `override` it."""
        try:
            found = row_mixing_in_file(onnx_path)
        except Exception as error:  # a file ORT reads and the onnx package does not (an ORT-format model)
            LOGGER.warning(
                "%s: the graph could not be read to check whether it mixes rows across the batch axis "
                "(%s); %s",
                consequence,
                error,
                override,
            )
            return False
        if found is None:
            return True
        LOGGER.info(
            "%s: %s, so a request's answer would depend on the requests run beside it; %s",
            consequence,
            found.describe(),
            override,
        )
        return False

    def _pads_graph_batches(self, onnx_path: Path) -> bool:
        """Whether each CUDA graph serves a bucket of batch sizes (runner.py, "CUDA graphs"): where Triton
        batches, requests are gathered, and the graph is known not to mix rows; so a padded row changes
        no other row's answer. Otherwise every batch size that comes takes a graph of its own."""
        if not (self.runner.cuda_graph and self.gather and self.max_batch_size > 1):
            return False
        if self.options.gather_requests is None and self._pipeline.outputs_follow_batch:
            independent = True  # _gathers has just checked the graph
        else:
            independent = self._rows_independent(
                onnx_path,
                "batches are not padded to a CUDA graph's bucket (each batch size gets a graph of its own)",
                "no parameter pads them",
            )
        return independent and self.runner.pad_graph_batches(self.max_batch_size)

    def _one_value_inputs(
        self, tensors: Mapping[str, torch.Tensor]
    ) -> Mapping[str, torch.Tensor] | InputError:
        """A request's overridable inputs of one value per request as the model takes them, or the
        request's error. With max_batch_size > 0 Triton gives each a batch axis: its rows must hold that
        one value alike, and the model gets one row. A scalar default arrives as [1] (Triton refuses empty
        dims)."""
        given = self._one_value.keys() & tensors.keys()
        if not given:
            return tensors
        converted = dict(tensors)
        for name in given:
            tensor, spec = tensors[name], self._one_value[name]
            if self.max_batch_size > 0:
                if len(tensor.shape) == 0 or not bool((tensor == tensor[:1]).all()):
                    return InputError(
                        f"input {name!r} holds one value for the whole request (its ONNX shape is "
                        f"{list(spec.shape)}, with no batch axis): send the same value in each row of the "
                        "request's batch axis, or leave the input out for the model's default"
                    )
                tensor = tensor[0]
            if not spec.shape and tuple(tensor.shape) == (1,):
                tensor = tensor.reshape(())
            converted[name] = tensor
        return converted

    def _run(self, requests: Sequence[Mapping[str, torch.Tensor]]) -> list[Result]:
        """run_requests, with one-value inputs made what the model takes first."""
        if not self._one_value:
            return run_requests(self._pipeline, requests, self.gather)
        prepared = [self._one_value_inputs(tensors) for tensors in requests]
        valid = [tensors for tensors in prepared if not isinstance(tensors, InputError)]
        answers = iter(run_requests(self._pipeline, valid, self.gather))
        return [tensors if isinstance(tensors, InputError) else next(answers) for tensors in prepared]

    def _zeros_request(
        self, specs: Sequence[TensorSpec] | None = None, batch_size: int = 1
    ) -> dict[str, torch.Tensor]:
        """Zeros of the model's input shapes (or of `specs`): `batch_size` rows where Triton batches
        (max_batch_size > 0, axis 0), other variable axes 1. For warm-up and arena clean-up runs."""
        batched = self.max_batch_size > 0

        def size(axis: int, dim: Dim) -> int:
            if axis == 0 and batched:
                return batch_size
            return dim if isinstance(dim, int) else 1

        def zeros(spec: TensorSpec) -> Any:
            shape = [size(axis, d) for axis, d in enumerate(spec.shape)]
            if spec.element_type.is_string:  # strings travel as numpy bytes (runner.py, "Strings")
                return np.full(shape, b"", dtype=object)
            return torch.zeros(shape, dtype=spec.element_type.tensor_dtype, device=self.runner.device)

        return {spec.name: zeros(spec) for spec in (self.runner.inputs if specs is None else specs)}

    def _shrink_arena_after_failure(self) -> None:
        """A failed run may have left ORT's CUDA arena swollen; a tiny run with shrinkage gives it back now
        rather than at the next request."""
        if self.runner.arena_needs_shrink:
            result = run_requests(self.runner, [self._zeros_request()], gather=False)[0]
            if isinstance(result, Exception):
                LOGGER.warning("could not shrink ORT's CUDA arena after a failed run: %s", result)

    def _warm_up(self, batch_sizes: Sequence[int]) -> None:
        """One run per batch size, in initialize: Triton reports the model ready only after it. The zeros
        have the shapes clients send, so hooks run too."""
        for batch_size in batch_sizes:
            started = time.perf_counter()
            result = self.infer([self._zeros_request(self._request_specs, batch_size)])[0]
            if isinstance(result, Exception):  # a model may reject zeros; serving can still go on
                LOGGER.warning(
                    "warm-up run at batch size %d failed (parameter warmup: false skips warm-up): %s",
                    batch_size,
                    result,
                )
            else:
                elapsed_ms = (time.perf_counter() - started) * 1e3
                LOGGER.info("warm-up run at batch size %d took %.1f ms", batch_size, elapsed_ms)

    @property
    def device(self) -> torch.device:
        return self.runner.device

    def infer(self, requests: Sequence[Mapping[str, torch.Tensor]]) -> list[Result]:
        """Results in request order. On return every output is complete (on the device, or on the host
        where the output placement put it), so handing it on through a raw DLPack capsule (which Triton
        does not synchronise) is safe. Host outputs live in buffers that the next infer() reuses: Triton
        has copied them by then; other callers copy what they keep."""
        started = time.perf_counter()
        self.runner.begin_execute()  # the previous execute's outputs have left through Triton
        debug = LOGGER.isEnabledFor(logging.DEBUG)
        before = self.runner.stats.snapshot() if debug else None
        stream_context = _on_stream(self._stream) if self._stream else contextlib.nullcontext()
        with stream_context:
            results = self._run(requests)
            self._shrink_arena_after_failure()
        queued = time.perf_counter()
        if self._stream is not None:
            try:
                self._stream.synchronize()  # the one wait of this execute: kernels and host copies
            except RuntimeError as error:  # a kernel failed after ORT returned: no output can be trusted
                self.runner.arena_needs_shrink = True
                failure = InferenceError(f"the device failed while computing this batch: {error}")
                results = [r if isinstance(r, InputError) else failure for r in results]
        finished = time.perf_counter()
        if self.metrics is not None and self._loaded:
            try:
                self.metrics.record_execute(
                    self.runner.stats,
                    requests=len(requests),
                    # axis 0 is a batch only where Triton batches
                    rows=sum(request_rows(t) for t in requests) if self.max_batch_size > 0 else 0,
                    on_device=self.runner.placement.is_cuda,
                )
            except Exception as error:  # a round trip to the server failed: the answers stand
                LOGGER.warning("could not send custom metrics: %s", error)
        reported = time.perf_counter()
        if before is not None:
            self.last_execute = ExecuteStats.between(
                before,
                self.runner.stats,
                requests=len(requests),
                input_devices=sorted(
                    {str(getattr(t, "device", "cpu")) for tensors in requests for t in tensors.values()}
                ),
                steps_us={
                    "infer_total": round((finished - started) * 1e6, 1),
                    "stream_sync": round((finished - queued) * 1e6, 1),
                    "metrics": round((reported - finished) * 1e6, 1),
                },
            )
        return [
            result if isinstance(result, Exception) else {name: result[name] for name in self.output_names}
            for result in results
        ]

    def close(self) -> None:
        """At unload: send the metrics counts that are still waiting for their flush interval."""
        if self.metrics is not None:
            try:
                self.metrics.flush()
            except Exception as error:  # the server may already refuse; unloading must go on
                LOGGER.warning("could not send the last metrics counts: %s", error)

    def log_execute(self, **steps_us: float) -> None:
        """The debug record of the last execute, with the adapter's own steps (µs) added."""
        if LOGGER.isEnabledFor(logging.DEBUG) and self.last_execute is not None:
            LOGGER.debug(self.last_execute.with_steps(**steps_us).log_line())
