"""A runner's run plans (run_plan.py), one per input signature: made on a signature's first run, kept
(least recently used out past PLAN_CACHE_SIZE), and lent out in rounds; on a CUDA session with graphs, a
CUDA graph per signature, or per bucket of batch sizes where batches are padded (graph_buckets.py), within
MAX_CUDA_GRAPHS ids; and the signatures whose outputs ORT sizes itself.

The runner asks for a signature's plan, lends it (its buffers now hold an answer), reports a failed run,
and opens a new lending round when the caller has consumed the answers (`reclaim`). What a plan holds is
made by the runner (`NewPlan`): the cache decides which plan a run takes and when one is made.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..model.signature import Tensors
from .graph_buckets import MAX_CUDA_GRAPHS, batch_bucket, graph_bucket, signature_at
from .ort_errors import mismatched_outputs
from .run_plan import PLAN_CACHE_SIZE, SIGNATURES_KEPT, OutputDim, RunPlan
from .tensor_checks import Signature, signature_of

LOGGER = logging.getLogger(__name__)

NewPlan = Callable[[Tensors, "int | None", frozenset[str]], RunPlan]
"""Makes the plan of tensors like these: with a CUDA graph id (None: no graph; ORT reserves 0), and the
outputs ORT allocates itself at each run."""


class RunPlanCache:
    """The plans of one runner (not thread-safe, as the runner is not)."""

    def __init__(
        self,
        new_plan: NewPlan,
        output_shapes: Mapping[str, tuple[OutputDim, ...] | None],
        shared_inputs: frozenset[str],
        cuda_graph: bool,
    ) -> None:
        self._new_plan = new_plan
        self._output_shapes = output_shapes
        self._shared_inputs = shared_inputs
        self.cuda_graph = cuda_graph
        """Whether runs capture CUDA graphs (option cuda_graph, on a CUDA session)."""
        self.graph_ids_given = 0
        """CUDA graphs ORT has captured (or is capturing) for this runner, at most MAX_CUDA_GRAPHS."""
        self.lending_round = 0
        """Counts reclaim(); 0: the caller never reclaims, and every run takes a plan of its own."""
        self._plans: OrderedDict[Signature, RunPlan] = OrderedDict()
        self._graph_plans: dict[Signature, RunPlan] = {}
        self._graph_max_rows = 0  # > 0: graphs serve buckets of batch sizes up to it (pad_graph_batches)
        # Signatures whose run computed some planned output at another size than the plan's (a decoder's
        # present.* named like the attention mask's axis, with a longer mask): ORT allocates those outputs.
        self.ort_sized: dict[Signature, frozenset[str]] = {}

    @property
    def count(self) -> int:
        """Plans cached now (CUDA graphs included)."""
        return len(self._plans) + len(self._graph_plans)

    def pad_graph_batches(self, max_rows: int, outputs_follow_batch: bool) -> bool:
        """Let each CUDA graph serve a bucket of batch sizes up to `max_rows`; whether it applies (it needs
        graphs, and outputs that all follow the batch axis)."""
        if not (self.cuda_graph and outputs_follow_batch and max_rows > 1):
            return False
        self._graph_max_rows = max_rows
        return True

    def reclaim(self) -> None:
        """The answers lent so far have been consumed: a new lending round (run_plan.py)."""
        self.lending_round += 1

    def lend(self, plan: RunPlan) -> None:
        """A run's answer is in `plan`'s buffers until the next round."""
        plan.lent_in = self.lending_round

    def plan_for(self, tensors: Tensors) -> tuple[RunPlan, int | None]:
        """The signature's cached plan, made on its first run, and the rows to pad it from (None: no
        padding); a spare plan when the cached one's buffers still hold an answer (lent in this round, or
        to a caller that never reclaims). Where batches are padded (pad_graph_batches), a graph is cached by
        its bucket's signature."""
        if self.lending_round == 0:
            return self._make(tensors, graph=False), None
        padding = batch_bucket(tensors, self._shared_inputs, self._graph_max_rows)
        if padding is not None and self.ort_sized and signature_of(tensors) in self.ort_sized:
            padding = None  # outputs of ORT's allocation: an ordinary plan (graphs need bound outputs)
        if padding is not None:
            rows, bucket = padding
            signature = signature_at(tensors, bucket, self._shared_inputs)
            plan = self._graph_plans.get(signature)
            if plan is None and self.graph_ids_given < MAX_CUDA_GRAPHS:
                import torch  # graphs run on CUDA sessions, on torch

                shapes = {  # a new plan reads only shapes and dtypes
                    name: torch.empty(size, dtype=dtype, device="meta") for name, dtype, size in signature
                }
                plan = self._graph_plans[signature] = self._make(shapes, graph=True)
            if plan is not None:
                if plan.lent_in == self.lending_round:
                    return self._make(tensors, graph=False), None
                return plan, rows
            # past the graph ids: an ordinary plan at the run's own shapes, below
        signature = signature_of(tensors)
        plan = self._graph_plans.get(signature) or self._plans.get(signature)
        if plan is None:
            graph = (
                padding is None
                and self.cuda_graph
                and self.graph_ids_given < MAX_CUDA_GRAPHS
                and signature not in self.ort_sized
            )
            plan = self._make(tensors, graph)
            if graph:
                self._graph_plans[signature] = plan
            else:
                self._plans[signature] = plan
                if len(self._plans) > PLAN_CACHE_SIZE:
                    self._plans.popitem(last=False)
        elif signature in self._plans:
            self._plans.move_to_end(signature)
        if plan.lent_in == self.lending_round:
            return self._make(tensors, graph=False), None
        return plan, None

    def input_buffers(self, tensors: Tensors, rows: int) -> dict[str, Any]:
        """Where the next run of `rows` rows of inputs like these (their dtypes, and their shapes past the
        batch axis) reads its batched inputs, for a caller that can write them there itself: the first rows
        of the fixed buffers of the bucket graph that run will replay. Empty when that run has no such graph
        yet, or its buffers hold an answer of this lending round (it would run as a spare)."""
        if not (self.lending_round and self._graph_max_rows and rows > 0):
            return {}
        plan = self._graph_plans.get(
            signature_at(tensors, graph_bucket(rows, self._graph_max_rows), self._shared_inputs)
        )
        if plan is None or plan.graph_inputs is None or not plan.padding_written:
            return {}
        if plan.lent_in == self.lending_round:
            return {}
        return dict(plan.rows_of(rows, self._shared_inputs).inputs)

    def failed(self, tensors: Tensors, plan: RunPlan, error: Exception) -> bool:
        """A run of `plan` failed: the plan is forgotten (what a failed run left bound is not trusted).
        Whether to run it again with ORT allocating outputs: ORT computed some output at another size than
        the plan took from a shared axis name (the model names the axis alike, the run's inputs differ).
        Remembered for the signature, so its next run does not fail first."""
        for plans in (self._plans, self._graph_plans):
            for signature, cached in list(plans.items()):
                if cached is plan:
                    del plans[signature]
        symbolic = [
            name
            for name in plan.outputs
            if any(not isinstance(dim, int) for dim in self._output_shapes[name] or ())
        ]
        mismatched = mismatched_outputs(error, symbolic)
        if not mismatched:
            return False
        signature = signature_of(tensors)
        before = self.ort_sized.get(signature, frozenset())
        if mismatched <= before:
            return False  # left to ORT already: some other failure
        if not self.ort_sized:
            LOGGER.info(
                "output(s) %s came out at another size than their axis names give (%s); ORT allocates "
                "them for runs of such shapes",
                ", ".join(sorted(mismatched)),
                error,
            )
        if len(self.ort_sized) < SIGNATURES_KEPT or signature in self.ort_sized:
            self.ort_sized[signature] = before | mismatched
            return True
        return False

    def _make(self, tensors: Tensors, graph: bool) -> RunPlan:
        ort_sized = self.ort_sized.get(signature_of(tensors), frozenset()) if self.ort_sized else frozenset()
        graph_id = self.graph_ids_given + 1 if graph else None
        plan = self._new_plan(tensors, graph_id, ort_sized)
        if graph_id is not None:
            self.graph_ids_given = graph_id
        return plan
