"""One execute on one lane: the requests of a Triton execute() gathered, run, and waited for once.

A `Lane` is a runner, what gathering calls around it (the runner, or the runner with its hooks), and the
CUDA stream both compute on; with the model plan it is all an execute needs, and `Lane.build` makes it from
the plan, a session and a stream. ModelInstance has one lane and runs Triton's execute() on it
synchronously: `queue` (make the runner's buffers free again, gather and run every request on the lane's
stream) then `wait` (the one stream sync). A scheduler that answers requests later from worker threads would
give each thread a lane of its own (Lane.build with the one plan) and call the same two steps: nothing here
is module-level state, and a runner's lending rounds, plans, checks and counters are its own. What such a
scheduler must still arrange is ORT's: its CUDA EP takes its stream at session creation (session.py,
user_compute_stream), so a stream per lane needs a session per stream (or ORT's choice of stream per run),
and CUDA graph ids belong to the session, so runners sharing one must not give out the same ids.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InferenceError, InputError
from ..model.signature import Dim, TensorSpec
from .arrays import Arrays
from .gather import BatchRunner, Result, run_requests
from .model_plan import ModelPlan
from .runner import IOBindingRunner
from .session import Placement

if TYPE_CHECKING:
    import onnxruntime as ort
    import torch

LOGGER = logging.getLogger(__name__)


@contextlib.contextmanager
def _on_stream(stream: torch.cuda.Stream) -> Iterator[None]:
    """The lane's device and stream current for the code inside; on leaving, the previous stream is
    restored on this same device, so no other device is ever made current (and given a context)."""
    import torch

    with torch.cuda.device(stream.device), torch.cuda.stream(stream):
        yield


@dataclass
class Lane:
    """A runner, what gathering calls around it, and the CUDA stream they compute on (None on CPU)."""

    plan: ModelPlan
    runner: IOBindingRunner
    batch_runner: BatchRunner
    stream: torch.cuda.Stream | None

    @classmethod
    def build(
        cls,
        plan: ModelPlan,
        session: ort.InferenceSession,
        placement: Placement,
        stream: torch.cuda.Stream | None,
        on_numpy: bool = False,
    ) -> Lane:
        """A lane of `plan` over `session`: a runner of its own, set as the plan decided, and the hooks
        around it where the model has them. `stream`: the one the session was created with (None on CPU);
        `on_numpy`: the runner binds numpy arrays (a CPU instance without hooks: arrays.py)."""
        options = plan.options
        runner = IOBindingRunner(
            session,
            placement,
            pinned_staging=options.pinned_staging,
            output_placement=plan.runner_output_placement,
            cuda_graph=plan.cuda_graph,
            arena_shrinkage=options.arena_shrinkage,
            on_numpy=on_numpy,
            graph_rows=plan.graph_rows,
            shared_inputs=plan.shared_inputs,
            follows_batch=plan.runner_outputs_follow_batch,
        )
        return cls(plan, runner, plan.batch_runner(runner), stream if runner.placement.is_cuda else None)

    def queue(self, requests: Sequence[Mapping[str, Any]]) -> list[Result]:
        """Results in request order, queued on the lane's stream: complete once `wait` returns. The
        previous execute's outputs must have been consumed (Triton has copied them before it sends the next
        execute): their buffers are written again."""
        self.runner.reclaim_outputs()
        stream_context = _on_stream(self.stream) if self.stream else contextlib.nullcontext()
        with stream_context:
            results = self._run(requests)
            self._shrink_arena_after_failure()
        return results

    def wait(self, results: list[Result]) -> list[Result]:
        """The one wait of an execute (kernels and host copies); if the device failed after ORT returned,
        no output can be trusted, and each request that was not refused gets the failure."""
        if self.stream is None:
            return results
        try:
            self.stream.synchronize()
        except RuntimeError as error:
            self.runner.arena_needs_shrink = True
            failure = InferenceError(f"the device failed while computing this batch: {error}")
            return [r if isinstance(r, InputError) else failure for r in results]
        return results

    def _run(self, requests: Sequence[Mapping[str, Any]]) -> list[Result]:
        """run_requests, with one-value inputs made what the model takes first."""
        plan = self.plan
        if not plan.one_value:
            return run_requests(self.batch_runner, requests, plan.gathers)
        prepared = [plan.one_value_inputs(tensors) for tensors in requests]
        valid = [tensors for tensors in prepared if not isinstance(tensors, InputError)]
        answers = iter(run_requests(self.batch_runner, valid, plan.gathers))
        return [tensors if isinstance(tensors, InputError) else next(answers) for tensors in prepared]

    def _shrink_arena_after_failure(self) -> None:
        """A failed run may have left ORT's CUDA arena swollen; a tiny run with shrinkage gives it back now
        rather than at the next request."""
        if self.runner.arena_needs_shrink:
            zeros = zeros_request(self.plan, self.runner.arrays, self.runner.inputs)
            result = run_requests(self.runner, [zeros], gather=False)[0]
            if isinstance(result, Exception):
                LOGGER.warning("could not shrink ORT's CUDA arena after a failed run: %s", result)


def zeros_request(
    plan: ModelPlan, arrays: Arrays, specs: Sequence[TensorSpec], batch_size: int = 1
) -> dict[str, Any]:
    """Zeros of `specs`' shapes: `batch_size` rows where Triton batches (max_batch_size > 0, axis 0), other
    variable axes 1. For warm-up and arena clean-up runs."""
    batched = plan.max_batch_size > 0

    def size(axis: int, dim: Dim) -> int:
        if axis == 0 and batched:
            return batch_size
        return dim if isinstance(dim, int) else 1

    def zeros(spec: TensorSpec) -> Any:
        shape = [size(axis, d) for axis, d in enumerate(spec.shape)]
        if spec.element_type.is_string:  # strings travel as numpy bytes (string_runner.py)
            return np.full(shape, b"", dtype=object)
        return arrays.zeros(shape, spec.element_type)

    return {spec.name: zeros(spec) for spec in specs}
