"""The pipelines' benchmark as a user runs it (python -m client.bench_pipelines), tiny: every way of every
pipeline is served by a real tritonserver, answers right (the benchmark checks each way's answer against
the reference before timing it and stops on a wrong one; classify_images' four requests, of four image
sizes, each against its own), is measured, and has its memory read; with --profile the hooked model's
steps per execute are read from its debug records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.bench_common import native_backend_folder
from client.pipelines import NATIVE_WAY, PIPELINES, WAYS
from tests.support.commands import python_module

pytestmark = pytest.mark.integration


def test_every_way_of_every_pipeline_answers_right_and_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "pipelines.json"
    result = python_module(
        "client.bench_pipelines",
        *("--repository", str(tmp_path / "repository"), "--seconds", "0.2", "--warmup", "0"),
        *("--client-processes", "1", "--concurrency", "1", "2", "--batch", "4", "--profile"),
        *("--out", str(out)),
        timeout=900,
    )
    assert "WRONG ANSWER" not in result.stdout + result.stderr
    report = json.loads(out.read_text())
    native = native_backend_folder(None) is not None  # NGC's images have it; elsewhere the way is skipped
    ways = {*WAYS, NATIVE_WAY} if native else set(WAYS)
    assert set(report["pipelines"]) == set(PIPELINES)
    for name, measured in report["pipelines"].items():
        assert set(measured["ways"]) == ways, name
        for way, entry in measured["ways"].items():
            for point in entry["points"].values():
                assert point["requests_per_s"] > 0 and 0 < point["p50_us"] <= point["p99_us"], (name, way)
            stubs = {"hooked": 1, "ensemble": 2, "bls": 2, "naive": 1, NATIVE_WAY: 1}[way]
            if "ensemble" in way and PIPELINES[name].preprocesses:
                stubs += 1  # the ensemble's pre-processing step (classify_images)
            assert entry["memory"]["stubs"] == stubs, (name, way, entry["memory"])
            assert entry["memory"]["stub_rss_mib"] > 0
        assert set(measured["hooked_against"]) == ways - {"hooked"}
        steps = measured["hooked_steps"]  # --profile: the hooked model's own steps, from its debug records
        assert steps["executes"] > 0 and steps["steps_us_p50"]["ort_run"] > 0, steps
    assert "the hooked model against each way" in result.stdout
    assert native or "no native onnxruntime backend" in result.stderr
