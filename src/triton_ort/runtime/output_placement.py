"""Where a CUDA instance's outputs go: the one rule, for the runner's outputs and for what hooks return.

Handing a GPU tensor back through Triton's python backend has a fixed cost (measured ~0.45 ms for a
KB-size output on an H200, docs/benchmarks.md), which a small output does not repay; such outputs are
copied once into pinned host memory, on the instance's stream. A CPU instance's outputs are on the host
anyway: callers ask only on a CUDA instance.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.options import DEFAULT_HOST_OUTPUT_MAX_BYTES


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
