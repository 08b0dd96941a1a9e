"""Where the tests find the repository's own files, and the demo ONNX file (built when missing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from triton_ort.testing.server import gpu_present

ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = ROOT / "model_repository"
DEMO_MODEL_PY = MODEL_REPOSITORY / "demo" / "1" / "model.py"

# KIND_AUTO puts the server's instances on the GPU where there is one; ORT's CUDA EP then uses TF32 for
# fp32 GEMMs, which changes the last bits. Elsewhere the server computes exactly what ORT on CPU computes.
SERVER_TOLERANCE = {"rtol": 2e-3, "atol": 2e-3} if gpu_present() else {"rtol": 1e-5, "atol": 1e-6}


def demo_onnx() -> Path:
    path = MODEL_REPOSITORY / "demo" / "1" / "model.onnx"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "build_models.py"), "--out", str(MODEL_REPOSITORY)],
            check=True,
        )
    return path


def read_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    """A model's config.pbtxt, parsed with Triton's own ModelConfig message."""
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def write_config(model_dir: Path, config: model_config_pb2.ModelConfig) -> None:
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


def pin_one_instance(model_dir: Path) -> None:
    """Tests that count stubs or read one instance's log in order run a copy with one instance."""
    config = read_config(model_dir)
    for group in config.instance_group:
        group.count = 1
    write_config(model_dir, config)


DEMO_MAX_BATCH = read_config(MODEL_REPOSITORY / "demo").max_batch_size
