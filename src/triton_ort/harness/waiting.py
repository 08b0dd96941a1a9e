"""Polling with a bound: the server, its log and its processes change in other processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout_s: float, what: str = "condition", interval_s: float = 0.1
) -> T:
    """Poll until `condition()` is truthy and return it; fail naming `what` and its last value after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s (last: {value!r})")
        time.sleep(interval_s)
