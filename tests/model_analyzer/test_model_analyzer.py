"""Triton's Model Analyzer profiles a model of ours in its local launch mode, starting our server through
`triton-ort-tritonserver` and measuring with perf_analyzer: the recipe of docs/model-analyzer.md, run as
written. `make test-model-analyzer` installs Model Analyzer in a venv of its own (its pins are not the
project's) and perf_analyzer, then runs this; without them it skips with the one-line reason."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from triton_ort.harness.server import free_ports

MODEL_ANALYZER = str(Path(os.environ["MODEL_ANALYZER"]).resolve()) if os.environ.get("MODEL_ANALYZER") else ""
PERF_ANALYZER = shutil.which("perf_analyzer") and str(Path(shutil.which("perf_analyzer") or "").resolve())


@pytest.mark.skipif(not MODEL_ANALYZER, reason="MODEL_ANALYZER unset: make test-model-analyzer sets it")
def test_model_analyzer_profiles_the_demo_through_our_tritonserver_entry_point(tmp_path: Path) -> None:
    assert Path(MODEL_ANALYZER).is_file(), f"MODEL_ANALYZER={MODEL_ANALYZER} is not a file"
    assert PERF_ANALYZER is not None, "no perf_analyzer on PATH (make perf-analyzer)"
    repository = tmp_path / "repository"
    shutil.copytree(
        ROOT / "model_repository" / "demo", repository / "demo", ignore=shutil.ignore_patterns("__pycache__")
    )
    http, grpc, metrics = free_ports(3)
    config = tmp_path / "model-analyzer.yaml"
    # the recipe's config (docs/model-analyzer.md), with free ports and a small search
    config.write_text(
        f"""model_repository: {repository}
profile_models: demo
triton_launch_mode: local
triton_server_path: {Path(sys.executable).parent / "triton-ort-tritonserver"}
perf_analyzer_path: {PERF_ANALYZER}
output_model_repository_path: {tmp_path / "output"}
override_output_model_repository: true
export_path: {tmp_path / "export"}
checkpoint_directory: {tmp_path / "checkpoints"}
client_protocol: grpc
run_config_search_max_instance_count: 1
run_config_search_max_model_batch_size: 2
run_config_search_max_concurrency: 2
triton_http_endpoint: localhost:{http}
triton_grpc_endpoint: localhost:{grpc}
triton_metrics_url: http://localhost:{metrics}/metrics
"""
    )
    result = subprocess.run(
        [MODEL_ANALYZER, "profile", "-f", str(config)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(tmp_path / "export" / "results" / "metrics-model-inference.csv") as table:
        rows = list(csv.DictReader(table))
    configs = {row["Model Config Path"] for row in rows}
    # the default config and the searched variants were each served by our entry point and measured
    assert "demo_config_default" in configs and len(configs) >= 2, configs
    assert all(float(row["Throughput (infer/sec)"]) > 0 for row in rows), rows
