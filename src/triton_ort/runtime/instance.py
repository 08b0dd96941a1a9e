"""One served model instance: what its executors (execute.py) run on, and nothing that imports Triton.

An instance is a device, a CUDA stream, an ORT session and a runner, built from the model plan
(model_plan.py), with its lanes (lane.py): the first is the classic execute's, the others (parameter
inflight_lanes) the in-flight executor's; warm-up and the custom metrics are small steps of its load and of
each run.

torch is imported only by an instance that runs on it (a GPU instance, or hooks): a CPU instance that the
python backend asks to run on numpy (`numpy_on_cpu`) never imports it (arrays.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ProviderError
from ..hooks.module import load_hooks
from ..model.load_checks import bf16_tensors, check_python_backend_types, checked_options
from ..model.options import ModelOptions
from ..model.served_config import ServedConfig
from .arrays import ON_TORCH_ON_CPU, NumpyArrays, require_torch
from .cuda_context import lower_stack_limit
from .gather import Result, request_rows
from .graph_buckets import graphs_on
from .lane import Lane, zeros_request
from .metrics import InstanceMetrics
from .model_plan import ModelPlan
from .session import (
    Placement,
    SharedWeights,
    create_session,
    session_placement,
    session_signature,
    shared_weights,
)
from .stats import ExecuteStats

if TYPE_CHECKING:
    import onnxruntime as ort
    import torch

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
    require_torch(f"a GPU instance (device {device_id})")
    import torch

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
        carries_bf16: Callable[[], bool] = lambda: True,
        numpy_on_cpu: bool = False,
    ) -> None:
        """`carries_bf16`: the python backend's probe, asked only of a model with BF16 tensors.
        `numpy_on_cpu`: a CPU instance without hooks or BF16 tensors takes and answers numpy arrays, and
        never imports torch (model.py asks for it); otherwise requests and answers are torch tensors."""
        # The checks that need no session or device come from load_checks, which `triton-ort config`
        # runs offline in the same order: its refusals are the load's.
        config = ServedConfig.parse(model_config)  # read once; every check below takes it
        bf16 = bool(bf16_tensors(config))
        # what the python backend can carry (model.py probes it)
        check_python_backend_types(config, carries_bf16=not bf16 or carries_bf16())
        options = checked_options(config)
        gpu = instance_kind.upper() == "GPU"
        on_numpy = numpy_on_cpu and not gpu and not options.hooks and not bf16
        stream, placement, self.options = _take_device(gpu, device_id, options, on_torch=not on_numpy)
        hooks = load_hooks(version_dir, self.options)
        onnx_path = version_dir / self.options.onnx_file
        # lanes in flight on a GPU: one copy of the weights, which every lane's session uses in place
        shared = _lane_weights(onnx_path, placement) if gpu and self.options.inflight_lanes > 1 else None
        self._shared_weights = shared  # as long as the sessions that use them
        session = create_session(onnx_path, self.options, placement, shared)
        # The CUDA EP may not have loaded (allow_cpu_fallback lets the session run on CPU).
        placement = session_placement(session, placement)
        # The plan first, from the config, the options and the session's signature; then the lane, as the
        # plan decided it.
        signature = session_signature(session)
        graphs = graphs_on(self.options.cuda_graph, placement, session, signature)
        if graphs and self.options.inflight_lanes:
            raise ConfigError(
                f"inflight_lanes {self.options.inflight_lanes} cannot be combined with CUDA graphs "
                "(cuda_graph / optimization.cuda.graphs) on a GPU instance: ORT captures a graph in CUDA's "
                "global capture mode, which the other lanes' and execute()'s allocations and "
                "synchronisations would break; drop one of them"
            )
        self.plan = ModelPlan.build(config, self.options, hooks, onnx_path, signature, graphs=graphs)
        self.lanes = [Lane.build(self.plan, session, placement, stream, on_numpy)]
        for _ in range(self.options.inflight_lanes - 1):
            self.lanes.append(_another_lane(self.plan, onnx_path, session, placement, on_numpy, shared))
        self.lane = self.lanes[0]
        self.runner = self.lane.runner
        self.batch_runner = self.lane.batch_runner
        self.last_execute: ExecuteStats | None = None  # kept only while DEBUG logging is on
        self.metrics: InstanceMetrics | None = None  # warm-up runs are not the clients' executes
        for index in range(len(self.lanes)):
            self._warm_up(self.options.warmup, index)
        self._cpu_fallback = gpu and not self.runner.placement.is_cuda
        self.start_metrics(metrics)
        LOGGER.info(
            "loaded %s on %s with providers %s; options %s",
            self.options.onnx_file,
            self.runner.device,
            session.get_providers(),
            self.options,
        )

    @property
    def device(self) -> Any:
        """torch.device where the instance runs on torch; "cpu" on numpy."""
        return self.runner.device

    @property
    def on_numpy(self) -> bool:
        """Whether requests and answers are numpy arrays (numpy_on_cpu), not torch tensors."""
        return isinstance(self.runner.arrays, NumpyArrays)

    def start_metrics(
        self, metrics: InstanceMetrics | None, in_flight: Callable[[], int] | None = None
    ) -> None:
        """Count into `metrics` from now on (the constructor's, or the execution's once the options are
        read: execute.py); warm-up runs are not counted. `in_flight`: the requests in flight now, for the
        in-flight gauge (an instance with lanes)."""
        self.metrics = _started_metrics(
            metrics, self.lanes, cpu_fallback=self._cpu_fallback, in_flight=in_flight
        )

    def drop_extra_lanes(self, why: str) -> None:
        """The classic execute from here on (execute.py decides): the lanes beyond the first go, with their
        sessions."""
        if len(self.lanes) > 1:
            LOGGER.warning(
                "inflight_lanes %d: %s; this instance answers in the classic execute, and its %d extra "
                "lanes are given back",
                len(self.lanes),
                why,
                len(self.lanes) - 1,
            )
            del self.lanes[1:]

    def _warm_up(self, batch_sizes: Sequence[int], lane: int = 0) -> None:
        """One run per batch size, in initialize: Triton reports the model ready only after it. The zeros
        have the shapes clients send, so hooks run too."""
        for batch_size in batch_sizes:
            started = time.perf_counter()
            zeros = zeros_request(self.plan, self.runner.arrays, self.plan.request_specs, batch_size)
            result = self.infer([zeros], lane)[0]
            if isinstance(result, Exception):  # a model may reject zeros; serving can still go on
                LOGGER.warning(
                    "warm-up run at batch size %d failed (parameter warmup: false skips warm-up): %s",
                    batch_size,
                    result,
                )
            else:
                elapsed_ms = (time.perf_counter() - started) * 1e3
                LOGGER.info("warm-up run at batch size %d took %.1f ms", batch_size, elapsed_ms)

    def infer(self, requests: Sequence[Mapping[str, Any]], lane_index: int = 0) -> list[Result]:
        """Results in request order, computed on lane `lane_index` (the first: the classic execute's).
        On return every output is complete (on the device, or on the host where the output placement put
        it), so handing it on through a raw DLPack capsule (which Triton does not synchronise) is safe.
        Host outputs live in buffers that the lane's next infer() reuses: Triton has copied them by then;
        other callers copy what they keep."""
        started = time.perf_counter()
        debug = LOGGER.isEnabledFor(logging.DEBUG)
        metrics = self.metrics
        lane = self.lanes[lane_index]
        runner = lane.runner
        lock = metrics.locks[lane_index] if metrics is not None else None
        if lock is not None:  # the metrics sender reads this lane's runner totals between its runs
            lock.acquire()
        try:
            before = runner.stats.snapshot() if debug else None
            results = lane.queue(requests)
            queued = time.perf_counter()
            results = lane.wait(results)
            finished = time.perf_counter()
            if metrics is not None:  # adds to local counts; the sender sends them (metrics.py)
                metrics.record_execute(
                    runner.stats,
                    requests=len(requests),
                    # axis 0 is a batch only where Triton batches
                    rows=sum(request_rows(t) for t in requests) if self.plan.max_batch_size > 0 else 0,
                    on_device=runner.placement.is_cuda,
                    lane=lane_index,
                )
        finally:
            if lock is not None:
                lock.release()
        reported = time.perf_counter()
        if before is not None:
            self.last_execute = ExecuteStats.between(
                before,
                runner.stats,
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
        served = self.plan.served_outputs
        return [result if isinstance(result, Exception) else served(result) for result in results]

    def close(self) -> None:
        """At unload (after the executor has answered what it held, execute.py): stop the metrics sender
        and send the counts still waiting for it."""
        if self.metrics is not None:
            try:
                self.metrics.close()
            except Exception as error:  # the server may already refuse; unloading must go on
                LOGGER.warning("could not send the last metrics counts: %s", error)

    def log_execute(self, **steps_us: float) -> None:
        """The debug record of the last execute, with the adapter's own steps (µs) added."""
        if LOGGER.isEnabledFor(logging.DEBUG) and self.last_execute is not None:
            LOGGER.debug(self.last_execute.with_steps(**steps_us).log_line())


def _take_device(
    gpu: bool, device_id: int, options: ModelOptions, on_torch: bool
) -> tuple[torch.cuda.Stream | None, Placement, ModelOptions]:
    """The instance's stream (GPU) and where its session computes; on CPU, the thread policy applied to
    the options."""
    if not gpu:
        if on_torch:
            require_torch(ON_TORCH_ON_CPU)
            import torch

            # On CPU, torch only moves and concatenates tensors and ORT's thread pool computes; torch's own
            # pool spinning after each copy competed with ORT's for the cores (measured: 2-core machine,
            # concurrency 16, 313 -> 548 requests/s for the demo; docs/benchmarks.md).
            torch.set_num_threads(1)
        return None, Placement("cpu"), _cpu_thread_policy(options)
    stream = _new_stream(device_id)
    if options.cuda_stack_bytes:
        lower_stack_limit(options.cuda_stack_bytes)  # before ORT and warm-up allocate
    return stream, Placement("cuda", device_id, stream.cuda_stream), options


def _another_lane(
    plan: ModelPlan,
    onnx_path: Path,
    session: ort.InferenceSession,
    placement: Placement,
    on_numpy: bool,
    shared: SharedWeights | None,
) -> Lane:
    """One more lane of the plan. On a GPU a session of its own on a stream of its own (ORT's CUDA EP takes
    its stream when the session is made), over the `shared` weights; on the CPU the first lane's session,
    which ORT runs from several threads at once, so the weights are held once there too."""
    if not placement.is_cuda:
        return Lane.build(plan, session, placement, None, on_numpy)
    stream = _new_stream(placement.device_id)
    own = Placement("cuda", placement.device_id, stream.cuda_stream)
    return Lane.build(plan, create_session(onnx_path, plan.options, own, shared), own, stream, on_numpy)


def _lane_weights(onnx_path: Path, placement: Placement) -> SharedWeights | None:
    """The model's weights on the device once, for every lane's session; None (each session then holds its
    own, and the log says so) where they cannot be made."""
    try:
        return shared_weights(onnx_path, placement)
    except Exception as error:
        LOGGER.warning(
            "the lanes' sessions each hold their own weights: they could not be shared (%s)", error
        )
        return None


def _started_metrics(
    metrics: InstanceMetrics | None,
    lanes: Sequence[Lane],
    cpu_fallback: bool,
    in_flight: Callable[[], int] | None = None,
) -> InstanceMetrics | None:
    """The custom metrics, started after warm-up (its runs are not the clients' executes) over the given
    lanes; None where there are none, or the server refused one (the instance serves without them)."""
    if metrics is None:
        return None
    try:
        metrics.loaded([lane.runner.stats for lane in lanes], cpu_fallback=cpu_fallback, in_flight=in_flight)
    except Exception as error:
        LOGGER.warning("custom metrics are off for this instance: %s", error)
        return None
    return metrics
