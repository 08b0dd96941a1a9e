"""Where a CUDA instance's outputs go: the one rule, for the runner's outputs and for what hooks return.

Handing a GPU tensor back through Triton's python backend has a fixed cost (measured ~0.45 ms for a
KB-size output on an H200, docs/benchmarks.md), which a small output does not repay; such outputs are
copied once into pinned host memory, on the instance's stream. A CPU instance's outputs are on the host
anyway: callers ask only on a CUDA instance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.options import DEFAULT_HOST_OUTPUT_MAX_BYTES
from ..model.signature import TensorSpec
from .stats import RunnerStats

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class OutputPlacement:
    """Where a CUDA session's outputs go: 'device', 'host', or 'auto' (host when one run's output bytes are
    at most host_max_bytes)."""

    mode: str = "auto"
    host_max_bytes: int = DEFAULT_HOST_OUTPUT_MAX_BYTES

    @property
    def reads_sizes(self) -> bool:
        """Whether the rule needs the outputs' bytes ('auto'); callers count them only then."""
        return self.mode == "auto"

    def to_host(self, output_bytes: int | None) -> bool:
        """Whether outputs of `output_bytes` bytes in all (None: unknown before the run, data-dependent
        sizes, which stay on the device under 'auto') go to the host."""
        if self.mode != "auto":
            return self.mode == "host"
        return output_bytes is not None and output_bytes <= self.host_max_bytes

    def plan_to_host(
        self, outputs: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...] | None]
    ) -> bool:
        """to_host for a run plan's outputs, of the shapes it fixes (None: a data-dependent one)."""
        total = None
        if self.reads_sizes and all(shapes[spec.name] is not None for spec in outputs):
            total = sum(
                math.prod(shapes[spec.name] or ()) * spec.element_type.tensor_dtype.itemsize
                for spec in outputs
            )
        return self.to_host(total)


def copy_to_host(
    outputs: Mapping[str, torch.Tensor], into: Mapping[str, torch.Tensor], stats: RunnerStats
) -> dict[str, torch.Tensor]:
    """The one host copy of a run's outputs (the runner's, or what hooks return): each device output copied
    asynchronously on the current stream into pinned host memory, `into`'s buffer of its name where there
    is one (a run plan's, reused), else pinned memory of this run's own (torch's caching host allocator,
    which a non-blocking copy to the host takes). Complete once the stream is synchronised."""
    answer = {}
    for name, tensor in outputs.items():
        host = into.get(name)
        if tensor.device.type != "cuda":
            answer[name] = tensor
        elif host is None:
            answer[name] = tensor.to("cpu", non_blocking=True)
            stats.device_to_host_copies += 1
        else:
            answer[name] = host.copy_(tensor, non_blocking=True)
            stats.device_to_host_copies += 1
    stats.host_output_runs += 1
    return answer
