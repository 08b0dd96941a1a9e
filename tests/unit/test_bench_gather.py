"""diagnostics.bench_gather, run small: it measures, agrees with itself, and reports what the docs quote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.commands import python_module


def run_bench_gather(out: Path, *args: str) -> tuple[dict[str, Any], str]:
    """diagnostics.bench_gather on the CPU with 20 calls (2 warm-up), its JSON in `out`: (the report,
    stdout)."""
    finished = python_module(
        "diagnostics.bench_gather",
        *("--device", "cpu", *args, "--calls", "20", "--warmup", "2", "--json", str(out)),
        timeout=120,
    )
    return json.loads(out.read_text()), finished.stdout


def test_the_gathering_cost_is_measured_with_answers_that_agree(tmp_path: Path) -> None:
    report, stdout = run_bench_gather(tmp_path / "gather.json", "--requests-per-execute", "1", "4")
    assert report["clock"] == "thread CPU time"
    assert [r["requests"] for r in report["results"]] == [1, 4]
    for result in report["results"]:
        assert result["answers_agree"]
        assert result["p50_us"]["gathered"] > 0 and result["p50_us"]["one_request"] > 0
        assert result["p50_us"]["apart"] > 0  # the same requests, one ORT run each
    assert "| 4 | 1 |" in stdout


def test_the_cost_of_running_a_quantized_models_requests_apart_is_measured(tmp_path: Path) -> None:
    """--quantized: a graph that mixes rows; its requests run apart agree with each run alone."""
    report, _ = run_bench_gather(tmp_path / "apart.json", "--requests-per-execute", "4", "--quantized")
    assert report["model"] == "linear, quantize_dynamic"
    (result,) = report["results"]
    assert result["answers_agree"] and result["apart_per_request_us"] > 0
