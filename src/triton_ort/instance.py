"""One served model instance, everything model.py needs, and nothing that imports Triton."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .errors import ConfigError, ProviderError, TritonOrtError
from .gather import Result, run_requests
from .options import ModelOptions, parameters_from_model_config, parse_options
from .runner import IOBindingRunner, OutputPlacement
from .session import Placement, create_session
from .signature import Dim, check_config
from .stats import ExecuteStats

LOGGER = logging.getLogger(__name__)


def _new_stream(device_id: int) -> torch.cuda.Stream:
    """The stream this instance computes on: torch's copies and ORT's kernels are both queued on it."""
    if not torch.cuda.is_available():
        raise ProviderError(
            f"this is a GPU instance (device {device_id}) but torch sees no CUDA device "
            f"(torch {torch.__version__}); install a CUDA build of torch in the python backend's environment"
        )
    return torch.cuda.Stream(device=device_id)  # type: ignore[no-untyped-call]


def cpu_threads_per_instance(model_config: Mapping[str, Any]) -> int:
    """This process's cores divided among the model's instances (at least one thread each)."""
    instances = sum(int(group.get("count", 1)) for group in model_config.get("instance_group", [])) or 1
    return max(1, len(os.sched_getaffinity(0)) // instances)


def check_warmup_batch_sizes(batch_sizes: Sequence[int], max_batch_size: int) -> None:
    """The `warmup` parameter's batch sizes must be ones Triton could send this model."""
    if max_batch_size > 0:
        too_large = [size for size in batch_sizes if size > max_batch_size]
        if too_large:
            raise ConfigError(
                f"parameter 'warmup': batch size {too_large[0]} is above max_batch_size {max_batch_size} "
                f"(expected batch sizes from 1 to {max_batch_size})"
            )
    elif any(size != 1 for size in batch_sizes):
        raise ConfigError(
            f"parameter 'warmup': batch sizes {','.join(map(str, batch_sizes))} need a batch axis, but "
            "max_batch_size is 0 (expected true or false for this model)"
        )


class ModelInstance:
    """Session, IO binding and request gathering for one Triton model instance, built once at load."""

    def __init__(
        self, model_config: Mapping[str, Any], version_dir: Path, instance_kind: str, device_id: int
    ) -> None:
        self.options: ModelOptions = parse_options(parameters_from_model_config(model_config))
        self.max_batch_size = int(model_config.get("max_batch_size", 0))
        check_warmup_batch_sizes(self.options.warmup, self.max_batch_size)
        gpu = instance_kind.upper() == "GPU"
        if not gpu:
            # On CPU, torch only moves and concatenates tensors and ORT's thread pool computes; torch's own
            # pool spinning after each copy competed with ORT's for the cores (measured: 2-core machine,
            # concurrency 16, 313 -> 548 requests/s for the demo; docs/benchmarks.md).
            torch.set_num_threads(1)
        self._stream = _new_stream(device_id) if gpu else None
        placement = (
            Placement("cuda", device_id, self._stream.cuda_stream) if self._stream else Placement("cpu")
        )
        if not gpu and self.options.intra_op_num_threads == 0:
            # Left to itself, every CPU instance's ORT pool takes one thread per core, and the instances of
            # one model then compete for the same cores: share them out instead.
            threads = cpu_threads_per_instance(model_config)
            self.options = dataclasses.replace(self.options, intra_op_num_threads=threads)
        session = create_session(version_dir / self.options.onnx_file, self.options, placement)
        self.runner = IOBindingRunner(
            session,
            placement,
            pinned_staging=self.options.pinned_staging,
            output_placement=OutputPlacement(
                self.options.output_placement, self.options.host_output_max_bytes
            ),
            cuda_graph=self.options.cuda_graph,
        )
        check_config(model_config, self.runner.inputs, self.runner.outputs)
        self.output_names = [str(entry["name"]) for entry in model_config.get("output", [])]
        self.last_execute: ExecuteStats | None = None  # kept only while DEBUG logging is on
        if not self.runner.placement.is_cuda:
            self._stream = None  # the CUDA EP did not load and allow_cpu_fallback let it run on CPU
        self._warm_up(self.options.warmup)
        LOGGER.info(
            "loaded %s on %s with providers %s; options %s",
            self.options.onnx_file,
            self.runner.device,
            session.get_providers(),
            self.options,
        )

    def _zeros_request(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        """Zeros of the model's input shapes: `batch_size` rows where Triton batches (max_batch_size > 0,
        axis 0), other variable axes 1. For warm-up and arena clean-up runs."""
        batched = self.max_batch_size > 0

        def size(axis: int, dim: Dim) -> int:
            if axis == 0 and batched:
                return batch_size
            return dim if isinstance(dim, int) else 1

        return {
            spec.name: torch.zeros(
                [size(axis, d) for axis, d in enumerate(spec.shape)],
                dtype=spec.element_type.torch_dtype,
                device=self.runner.device,
            )
            for spec in self.runner.inputs
        }

    def _shrink_arena_after_failure(self) -> None:
        """A failed run may have left ORT's CUDA arena swollen; a tiny run with shrinkage gives it back now
        rather than at the next request."""
        if self.runner.arena_needs_shrink:
            result = run_requests(self.runner, [self._zeros_request()], gather=False)[0]
            if isinstance(result, Exception):
                LOGGER.warning("could not shrink ORT's CUDA arena after a failed run: %s", result)

    def _warm_up(self, batch_sizes: Sequence[int]) -> None:
        """One run per batch size, in initialize: Triton reports the model ready only after it."""
        for batch_size in batch_sizes:
            started = time.perf_counter()
            result = self.infer([self._zeros_request(batch_size)])[0]
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
        stream_context = torch.cuda.stream(self._stream) if self._stream else contextlib.nullcontext()
        with stream_context:
            results = run_requests(self.runner, requests, self.options.gather_requests)
            self._shrink_arena_after_failure()
        queued = time.perf_counter()
        if self._stream is not None:
            try:
                self._stream.synchronize()  # the one wait of this execute: kernels and host copies
            except RuntimeError as error:  # a kernel failed after ORT returned: no output can be trusted
                self.runner.arena_needs_shrink = True
                failure = TritonOrtError(f"the device failed while computing this batch: {error}")
                results = [failure for _ in results]
        finished = time.perf_counter()
        if before is not None:
            self.last_execute = ExecuteStats.between(
                before,
                self.runner.stats,
                requests=len(requests),
                input_devices=sorted({str(t.device) for tensors in requests for t in tensors.values()}),
                steps_us={
                    "infer_total": round((finished - started) * 1e6, 1),
                    "stream_sync": round((finished - queued) * 1e6, 1),
                },
            )
        return [
            result if isinstance(result, Exception) else {name: result[name] for name in self.output_names}
            for result in results
        ]

    def log_execute(self, **steps_us: float) -> None:
        """The debug record of the last execute, with the adapter's own steps (µs) added."""
        if LOGGER.isEnabledFor(logging.DEBUG) and self.last_execute is not None:
            LOGGER.debug(self.last_execute.with_steps(**steps_us).log_line())
