"""The soak's memory verdict: the RSS floor, which requests in flight do not move and a leak does."""

from __future__ import annotations

import numpy as np

from client.soak import floor_growth

MIB = 1024 * 1024


def _readings(leak_mib: float, swing_mib: float, count: int = 60, seed: int = 0) -> list[int]:
    """A flat 400 MiB, plus up to `swing_mib` of transient memory at random, plus a linear leak."""
    rng = np.random.default_rng(seed)
    leak = np.linspace(0, leak_mib, count)
    swing = rng.uniform(0, swing_mib, count)
    return [int((400 + a + b) * MIB) for a, b in zip(leak, swing, strict=True)]


def test_transient_memory_is_not_growth() -> None:
    # tritonserver under the CI soak: single readings up to 60 MiB apart with no trend; comparing the
    # first reading with the last once failed a 64 MiB limit this way
    for seed in range(20):
        growth = floor_growth(_readings(leak_mib=0, swing_mib=60, seed=seed))
        assert growth is not None and abs(growth) < 20 * MIB, seed


def test_a_leak_raises_the_floor() -> None:
    for seed in range(20):
        growth = floor_growth(_readings(leak_mib=120, swing_mib=60, seed=seed))
        assert growth is not None and growth > 64 * MIB, seed


def test_too_few_readings_measure_nothing() -> None:
    assert floor_growth([]) is None
    assert floor_growth([400 * MIB]) is None
    assert floor_growth([400 * MIB, 500 * MIB]) == 100 * MIB
