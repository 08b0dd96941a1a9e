"""client.bench --sweep --tuned: tune's pick measured as one more variant of the sweep, in the same run
and by the same load, and judged against the grid's best by the median over rounds."""

from __future__ import annotations

from pathlib import Path

from client.bench import Measurement, sweep_summary, tuned_variant
from triton_ort.harness.repository import read_config


def _measurement(anchor: str, rate: float) -> Measurement:
    return Measurement("demo", anchor, "cuda-shm", 16, 100, 100, 1.0, 1.0, 1.0, rate)


def test_the_tuned_config_is_served_as_model_tuned_on_the_models_own_version_folders(tmp_path: Path) -> None:
    model = tmp_path / "demo" / "1"
    model.mkdir(parents=True)
    (model / "model.onnx").write_bytes(b"onnx")
    tuned = tmp_path / "config.tuned.pbtxt"
    tuned.write_text(
        "# triton-ort tune: 4 inst, delay 100 us\n"
        'name: "demo"\nbackend: "onnxruntime_zerocopy"\nmax_batch_size: 1000\n'
        "instance_group { count: 4 kind: KIND_GPU }\n"
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
    )

    name = tuned_variant(tmp_path, "demo", tuned)

    assert name == "demo_tuned"
    config = read_config(tmp_path / name)
    assert config.name == "demo_tuned"
    assert [g.count for g in config.instance_group] == [4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert (tmp_path / name / "1" / "model.onnx").read_bytes() == b"onnx"
    assert tuned_variant(tmp_path, "demo", tuned) == name  # a second run of the sweep reuses it


def test_the_summary_judges_the_tuned_median_against_the_best_median_of_the_grid() -> None:
    results = [
        _measurement("i1_d0", 100.0),
        _measurement("i4_d100", 300.0),  # one fast round does not make the best
        _measurement("i2_d0", 200.0),
        _measurement("tuned", 190.0),
        _measurement("i1_d0", 110.0),
        _measurement("i4_d100", 150.0),
        _measurement("i2_d0", 210.0),
        _measurement("tuned", 200.0),
        _measurement("i1_d0", 90.0),
        _measurement("i4_d100", 160.0),
        _measurement("i2_d0", 205.0),
        _measurement("tuned", 195.0),
    ]
    summary = sweep_summary(results)["demo"]
    assert summary["best"] == "i2_d0"
    assert summary["median_requests_per_s"]["i4_d100"] == 160.0
    assert summary["tuned_vs_best"] == 195.0 / 205.0
    assert "tuned_vs_best" not in sweep_summary([m for m in results if m.anchor != "tuned"])["demo"]


def test_without_grid_variants_the_summary_names_no_best_and_tuned_takes_one_model() -> None:
    assert sweep_summary([_measurement("tuned", 100.0)]) == {
        "demo": {"median_requests_per_s": {"tuned": 100.0}}
    }
    import subprocess
    import sys

    from tests.support.paths import ROOT

    refused = subprocess.run(
        [sys.executable, "-m", "client.bench", "--sweep", "--models", "demo", "mlp1024", "--tuned", "x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert refused.returncode == 2 and "--tuned FILE: with --sweep and one model" in refused.stderr
