"""Where the tests find the repository's own files, and the demo ONNX file (built when missing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

from triton_ort.harness.repository import read_config
from triton_ort.harness.server import gpu_present


class Tolerance(TypedDict):
    """numpy.testing.assert_allclose's tolerances, as keyword arguments."""

    rtol: float
    atol: float


ROOT = Path(__file__).resolve().parents[2]
MODEL_REPOSITORY = ROOT / "model_repository"
DEMO_MODEL_PY = MODEL_REPOSITORY / "demo" / "1" / "model.py"

# KIND_AUTO puts the server's instances on the GPU where there is one; ORT's CUDA EP then uses TF32 for
# fp32 GEMMs, which changes the last bits. Elsewhere the server computes exactly what ORT on CPU computes.
# ORT's CUDA EP computes fp32 MatMul/Gemm in TF32 by default (use_tf32; docs/gpu-hosts.md, "Answers on the
# GPU: TF32").
TF32_TOLERANCE: Tolerance = {"rtol": 2e-3, "atol": 2e-3}
SERVER_TOLERANCE: Tolerance = TF32_TOLERANCE if gpu_present() else {"rtol": 1e-5, "atol": 1e-6}


def demo_onnx() -> Path:
    path = MODEL_REPOSITORY / "demo" / "1" / "model.onnx"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "build_models.py"), "--out", str(MODEL_REPOSITORY)],
            check=True,
        )
    return path


DEMO_MAX_BATCH = read_config(MODEL_REPOSITORY / "demo").max_batch_size


def demo_instance_config(max_batch_size: int, **parameters: str) -> dict[str, Any]:
    """The demo's model config as Triton hands it to a ModelInstance (JSON of ModelConfig), with these
    string parameters."""
    return {
        "input": [{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2010]}],
        "output": [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}],
        "max_batch_size": max_batch_size,
        "parameters": {key: {"string_value": value} for key, value in parameters.items()},
    }
