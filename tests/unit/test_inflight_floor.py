"""diagnostics.inflight_floor's yardstick: what the waits and the GIL-held holds alone would allow."""

from __future__ import annotations

import math

import pytest

from diagnostics.inflight_floor import ideal_rate


def test_lanes_overlap_waits_and_the_gil_caps_holds() -> None:
    assert ideal_rate("classic", 2.0, 0.0) == pytest.approx(500.0)
    assert ideal_rate("inflight_4", 2.0, 0.0) == pytest.approx(2000.0)
    assert ideal_rate("classic", 0.5, 300.0) == pytest.approx(1250.0)
    assert ideal_rate("inflight_8", 0.5, 300.0) == pytest.approx(1e6 / 300)  # the GIL's ceiling
    assert math.isinf(ideal_rate("inflight_2", 0.0, 0.0))
