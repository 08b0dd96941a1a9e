"""Count host<->device copies with CUPTI (through torch.profiler): a debug mode for proving zero-copy.

Set TRITON_ORT_COUNT_COPIES=1 in the server's environment: every execute() is then profiled and the number
of memcpy activities between host and device is logged. Profiling costs milliseconds per execute, so it is
off unless asked for.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator

import torch

from .stats import log_records

LOGGER = logging.getLogger(__name__)
CUPTI_MARKER = "host<->device copies (CUPTI): "


def copy_counting_enabled() -> bool:
    return os.environ.get("TRITON_ORT_COUNT_COPIES", "") == "1" and torch.cuda.is_available()


@contextlib.contextmanager
def count_host_device_copies(enabled: bool) -> Iterator[None]:
    """Log 'host<->device copies (CUPTI): N' for the code run inside, when enabled."""
    if not enabled:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        yield
        torch.cuda.synchronize()
    names = [e.name for e in profiler.events() if "HtoD" in e.name or "DtoH" in e.name]
    counts = {direction: sum(direction in name for name in names) for direction in ("HtoD", "DtoH")}
    LOGGER.info("%s%s %s", CUPTI_MARKER, json.dumps(counts), sorted(set(names)))


def cupti_counts_from_log(text: str) -> list[dict[str, int]]:
    """The per-execute counts logged above, in order: {'HtoD': n, 'DtoH': m}."""
    return log_records(text, CUPTI_MARKER)
