"""Where the tests find the repository's own files, and the demo ONNX file (built when missing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = ROOT / "model_repository"
DEMO_MODEL_PY = MODEL_REPOSITORY / "demo" / "1" / "model.py"


def demo_onnx() -> Path:
    path = MODEL_REPOSITORY / "demo" / "1" / "model.onnx"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "build_models.py"), "--out", str(MODEL_REPOSITORY)],
            check=True,
        )
    return path
