"""diagnostics/profile_lanes.py: the overlap arithmetic, and a short run on this host's provider (on a CPU
the GPU columns are absent; the GPU test host runs the real question)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from client.bench_common import linear_onnx
from diagnostics.profile_lanes import measure, union_length


def test_union_counts_overlapping_time_once() -> None:
    assert union_length([]) == 0.0
    assert union_length([(0.0, 1.0), (2.0, 3.0)]) == pytest.approx(2.0)
    assert union_length([(0.0, 2.0), (1.0, 3.0)]) == pytest.approx(3.0)  # overlap once
    assert union_length([(1.0, 3.0), (0.0, 4.0), (2.0, 2.5)]) == pytest.approx(4.0)  # nested, unsorted


def test_each_lane_runs_and_is_timed(tmp_path: Path) -> None:
    onnx_path = linear_onnx(tmp_path / "linear.onnx")
    result = measure(onnx_path, lanes=2, batch=4, seconds=0.2, warmup=0.05)
    assert result["lanes"] == 2 and len(result["runs_per_lane"]) == 2
    assert all(runs > 0 for runs in result["runs_per_lane"]), result
    assert result["runs"] == sum(result["runs_per_lane"]) and result["runs_per_s"] > 0
    assert result["host_in_run_us"] > 0 and result["host_cpu_us"] > 0
    assert ("gpu_overlap" in result) == torch.cuda.is_available()
