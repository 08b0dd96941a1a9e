"""`triton-ort tune` as a user runs it (the installed command, from any folder) on a real tritonserver: two
candidates measured, the table printed, the winner written as config.tuned.pbtxt and, with --write, as
config.pbtxt with the old one kept; and a model that loads under no candidate refused with its reason.
Short windows keep each candidate to a few seconds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.paths import MODEL_REPOSITORY, demo_onnx
from triton_ort.harness.repository import pin_one_instance, write_config

pytestmark = pytest.mark.integration

COMMAND = str(Path(sys.executable).parent / "triton-ort")
SHORT = ("--batch", "2", "--concurrency", "1", "2", "-p", "200", "--max-windows", "3", "--queue-delays", "0")
ONLY_INSTANCES = ("--levers", "instances")  # on a GPU host too: the two instance counts, nothing more


def _demo(folder: Path) -> Path:
    shutil.copytree(MODEL_REPOSITORY / "demo", folder)
    shutil.copy(demo_onnx(), folder / "1" / "model.onnx")
    pin_one_instance(folder)
    return folder


def tune(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, "tune", str(folder), *SHORT, *args],
        cwd="/",  # any folder: the command needs nothing from the checkout
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_two_candidates_are_measured_and_the_winner_is_written(tmp_path: Path) -> None:
    folder = _demo(tmp_path / "demo")
    before = (folder / "config.pbtxt").read_text()
    args = (
        "--levers",  # the one lever on every host (a GPU host adds graphs and MPS by default)
        "instances",
        "--instances",
        "1",
        "2",
        "--shared-memory",
        "system",
        "--write",
        "--json",
        str(tmp_path / "tune.json"),
    )
    done = tune(folder, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["candidate", "infer/s"], done.stdout
    rows = [line for line in lines[2:] if "inst, delay" in line and not line.startswith("winner")]
    assert {row.split(",")[0] for row in rows} == {"1 inst", "2 inst"}, done.stdout + done.stderr[-3000:]
    report = json.loads((tmp_path / "tune.json").read_text())
    assert [r["error"] for r in report] == [None, None], done.stdout + done.stderr[-3000:]
    assert all(len(r["points"]) == 2 and r["score_infer_per_s"] > 0 and r["rss_mib"] > 0 for r in report)
    best = max(report, key=lambda r: r["score_infer_per_s"])
    assert f"winner: {best['candidate']}" in done.stdout
    tuned = (folder / "config.tuned.pbtxt").read_text()
    assert tuned.startswith(f"# triton-ort tune: {best['candidate']}\n")
    config = text_format.Parse(tuned, model_config_pb2.ModelConfig())
    assert config.instance_group[0].count == best["levers"]["instances"]
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()) == config
    assert (folder / "config.pbtxt.bak").read_text() == before


def test_a_model_that_loads_under_no_candidate_is_refused_with_its_reason(tmp_path: Path) -> None:
    folder = _demo(tmp_path / "demo")
    (folder / "1" / "model.onnx").write_bytes(b"not an onnx file")
    done = tune(folder, "--instances", "1")
    assert done.returncode == 1
    assert "did not load:" in done.stdout and "no candidate served the model" in done.stderr, done.stdout
    assert not (folder / "config.tuned.pbtxt").exists()


def test_open_axes_without_shape_end_the_search_in_one_line_naming_every_input(tmp_path: Path) -> None:
    """The request data is the same under every candidate: inputs whose open axes nothing sizes stop tune at
    the first candidate, in the one line perf and infer give (every input, the --shape options to paste),
    not as an error per candidate, each after a server start."""
    folder = tmp_path / "pair"
    graphs.pairwise_add(folder / "1" / "model.onnx")
    config = model_config_pb2.ModelConfig(backend="onnxruntime_zerocopy", max_batch_size=8)
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    write_config(folder, config)
    done = tune(folder, *ONLY_INSTANCES, "--instances", "1", "2")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "'x' [any], 'y' [any]" in errors[0], done.stderr
    assert "--shape x:16 --shape y:16" in errors[0] and "--input-data FILE" in errors[0], errors
    assert sum(line.endswith("...") for line in done.stderr.splitlines()) == 1, done.stderr  # one candidate
    assert not (folder / "config.tuned.pbtxt").exists()
