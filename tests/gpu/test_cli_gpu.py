"""The CLI's CUDA-shared-memory path on a GPU host (docs/gpu-host.md), skipped elsewhere: the checked
request goes through CUDA shared memory both ways and matches ONNX Runtime on CPU; a refused batch
still costs one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import ROOT, demo_onnx
from tests.support.repository import build_test_repository
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer

pytestmark = pytest.mark.gpu


def test_cli_cuda_shm_infer_matches_cpu_ort_and_refusals_stay_one_line(tmp_path: Path) -> None:
    repository = build_test_repository(tmp_path / "repository")
    x = np.random.default_rng(5).standard_normal((6, 2010)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "expected.npz", **reference_outputs(demo_onnx(), {"np_script_embeddings": x}))
    with LocalTritonServer(repository) as server:
        triton_ort = str(Path(sys.executable).parent / "triton-ort")
        base = [triton_ort, "infer", "--url", server.http_url, "demo", "--cuda-shm"]
        ok = subprocess.run(
            [
                *base,
                *("--input", f"np_script_embeddings={tmp_path / 'x.npy'}"),
                *("--expect", str(tmp_path / "expected.npz"), "--rtol", "2e-3", "--atol", "2e-3"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "CUDA shared memory" in ok.stdout and "OK: outputs match" in ok.stdout
        refused = subprocess.run(
            [*base, "--batch", "100000"], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "expected 1 to" in refused.stderr
