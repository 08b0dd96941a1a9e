"""What a GPU instance's CUDA context reserves for the stacks of GPU threads, and lowering it.

A CUDA context reserves local memory for the per-thread stack limit times every thread the GPU can hold
resident: on an H200 (132 SMs of 2048 threads) CUDA's default 1024 bytes came to 248 MiB more than 64
bytes, in a context of 518 MiB (measured with `diagnostics.bench_memory`, docs/benchmarks.md "Choosing the
instance count"). Every instance is a stub process with a context of its own, so that reservation is paid once
per instance. torch and ONNX Runtime share the process's primary context, so one limit covers both.

Lowering the limit is safe: the driver raises it again, for good, at the launch of any kernel that needs
more (cuCtxSetLimit, CU_LIMIT_STACK_SIZE), at the cost of that one resize. The call goes to the driver
API (libcuda, present wherever CUDA runs) because neither torch nor ONNX Runtime exposes it.
"""

from __future__ import annotations

import ctypes
import logging

LOGGER = logging.getLogger(__name__)

_CU_LIMIT_STACK_SIZE = 0


def _driver() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def stack_limit() -> int | None:
    """The current context's per-thread stack limit in bytes; None without a current CUDA context."""
    driver = _driver()
    value = ctypes.c_size_t()
    if driver is None or driver.cuCtxGetLimit(ctypes.byref(value), _CU_LIMIT_STACK_SIZE) != 0:
        return None
    return int(value.value)


def lower_stack_limit(limit_bytes: int) -> int | None:
    """Set the current context's per-thread stack limit to `limit_bytes` where it is higher; the limit
    now (None where the driver cannot be asked). Called with the instance's device current, after torch
    created the context. A failure is logged and serving goes on with CUDA's limit."""
    current = stack_limit()
    if current is None or current <= limit_bytes:
        return current
    driver = _driver()
    assert driver is not None  # stack_limit() found it
    status = driver.cuCtxSetLimit(_CU_LIMIT_STACK_SIZE, ctypes.c_size_t(limit_bytes))
    if status != 0:
        LOGGER.warning(
            "could not lower the CUDA stack limit to %d bytes (CUresult %d); it stays %d bytes",
            limit_bytes,
            status,
            current,
        )
    return stack_limit()
