"""A real native onnxruntime backend beside ours, from the command line: `triton-ort serve --backend
onnxruntime=DIR` serves a repository with our model and its native twin, and `triton-ort perf
--compare-native` measures both and prints native / ours.

It needs the backend's folder (libtriton_onnxruntime.so built for this tritonserver's release): NGC's
images have it at /opt/tritonserver/backends/onnxruntime; elsewhere give one with TRITON_ORT_NATIVE_BACKEND
(docs/development.md). Without one it is skipped: CI's machine has none."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from client.bench_common import NATIVE_LIBRARY, native_backend_folder
from tests.support.launcher import READY, launch, launcher_command
from tests.support.paths import ROOT
from triton_ort.harness.server import free_ports

pytestmark = pytest.mark.integration


def native_folder() -> Path | None:
    given = os.environ.get("TRITON_ORT_NATIVE_BACKEND")
    return native_backend_folder(Path(given) if given else None)


@pytest.mark.skipif(
    native_folder() is None,
    reason="no native onnxruntime backend here "
    f"(TRITON_ORT_NATIVE_BACKEND=DIR, a folder with {NATIVE_LIBRARY})",
)
def test_perf_compares_ours_with_a_real_native_backend_served_beside_it(tmp_path: Path) -> None:
    folder = native_folder()
    assert folder is not None
    repository = tmp_path / "repository"
    demo = ROOT / "model_repository" / "demo" / "1" / "model.onnx"
    for name, backend in (("demo", "onnxruntime_zerocopy"), ("demo_native", "onnxruntime")):
        (repository / name / "1").mkdir(parents=True)
        shutil.copy(demo, repository / name / "1" / "model.onnx")
        forced = '\nparameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }'
        (repository / name / "config.pbtxt").write_text(
            f'backend: "{backend}"\nmax_batch_size: 128' + (forced if backend != "onnxruntime" else "") + "\n"
        )
    http, grpc, metrics = free_ports(3)
    command = [*launcher_command(repository, (http, grpc, metrics)), f"--backend=onnxruntime={folder}"]
    launched = launch(command, tmp_path / "tmp")
    try:
        launched.wait_for_line(READY, 300)
        out = tmp_path / "perf.json"
        perf = [str(Path(sys.executable).parent / "triton-ort"), "perf", "demo", "-i", "grpc"]
        perf += ["-u", f"127.0.0.1:{grpc}", "-b", "8", "--concurrency", "1", "--compare-native"]
        perf += ["--measurement-interval", "200", "--max-windows", "4", "--json", str(out)]
        done = subprocess.run(perf, capture_output=True, text=True, timeout=300, check=False)
    finally:
        launched.process.send_signal(signal.SIGINT)  # as Ctrl-C: the launcher stops its server
        launched.process.wait(timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["native"] == "demo_native"
    measured = {point["model"]: point for point in report["points"]}
    assert set(measured) == {"demo", "demo_native"}
    assert all(point["infer_per_s"] > 0 for point in measured.values()), measured
    assert "native onnxruntime / demo at c=1: p50" in done.stdout
