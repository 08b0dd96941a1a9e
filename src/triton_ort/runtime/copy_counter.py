"""Count memory copies with CUPTI (through torch.profiler): a debug mode for proving zero-copy.

Set TRITON_ORT_COUNT_COPIES=1 in the server's environment: every execute() is then profiled and the number
of memcpy activities between host and device, and between devices, is logged. Profiling costs
milliseconds per execute, so it is off unless asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from .stats import log_records

LOGGER = logging.getLogger(__name__)
CUPTI_MARKER = "host<->device copies (CUPTI): "
DEVICE_COPIES_MARKER = "device<->device copies (CUPTI): "
# CUPTI's memcpy kinds as torch.profiler names them ("Memcpy DtoD (Device -> Device)"): DtoD within one
# GPU, PtoP between two GPUs (peer to peer).
HOST_DEVICE_KINDS = ("HtoD", "DtoH")
DEVICE_DEVICE_KINDS = ("DtoD", "PtoP")


def copy_counting_enabled() -> bool:
    """TRITON_ORT_COUNT_COPIES=1 on a host with a GPU (only then is torch imported here)."""
    if os.environ.get("TRITON_ORT_COUNT_COPIES", "") != "1" or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def count_host_device_copies(enabled: bool, device: Any = None) -> Iterator[None]:
    """Log 'host<->device copies (CUPTI): N' and 'device<->device copies (CUPTI): N' for the code run
    inside, when enabled. `device`: the GPU to synchronise before counting (the instance's; None would be
    the current device)."""
    if not enabled:
        yield
        return
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        yield
        torch.cuda.synchronize(device if getattr(device, "type", None) == "cuda" else None)
    names = [e.name for e in profiler.events() if e.name.startswith("Memcpy ")]
    for marker, kinds in ((CUPTI_MARKER, HOST_DEVICE_KINDS), (DEVICE_COPIES_MARKER, DEVICE_DEVICE_KINDS)):
        counts = {kind: sum(f"Memcpy {kind} " in name for name in names) for kind in kinds}
        LOGGER.info(
            "%s%s %s", marker, json.dumps(counts), sorted({n for n in names if any(k in n for k in kinds)})
        )


def cupti_counts_from_log(text: str) -> list[dict[str, int]]:
    """The per-execute host<->device counts logged above, in order: {'HtoD': n, 'DtoH': m}."""
    return log_records(text, CUPTI_MARKER)


def device_copy_counts_from_log(text: str) -> list[dict[str, int]]:
    """The per-execute device<->device counts logged above, in order: {'DtoD': n, 'PtoP': m}."""
    return log_records(text, DEVICE_COPIES_MARKER)
