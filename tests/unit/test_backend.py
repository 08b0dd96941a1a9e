"""The Python-based backend's installer, and the one model.py every model runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import DEMO_MODEL_PY, ROOT
from triton_ort.backend import BACKEND_NAME, MODEL_PY, install


def test_demo_model_py_is_the_backends_model_py() -> None:
    """A model's own copy of model.py and the backend's are the same file: they cannot drift."""
    assert DEMO_MODEL_PY.read_text() == MODEL_PY


def test_model_py_imports_only_the_adapter() -> None:
    code = compile(MODEL_PY, "model.py", "exec")
    assert "TritonPythonModel" in code.co_names
    assert "from triton_ort.backend.model import TritonPythonModel" in MODEL_PY


def test_install_writes_the_backend_folder(tmp_path: Path) -> None:
    written = install(tmp_path)
    assert written == tmp_path / BACKEND_NAME / "model.py"
    assert written.read_text() == MODEL_PY
    assert install(tmp_path) == written  # installing again replaces it


def test_install_command_line(tmp_path: Path) -> None:
    (tmp_path / "python").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "triton_ort.backend", "install", "--backend-directory", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == str(tmp_path / BACKEND_NAME / "model.py")
    assert done.stderr == ""
    assert (tmp_path / BACKEND_NAME / "model.py").read_text() == MODEL_PY


def test_install_warns_when_the_python_backend_is_not_beside_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "triton_ort.backend", "install", "--backend-directory", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"{tmp_path / 'python'} does not exist" in done.stderr


def test_install_refuses_a_backend_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "opt" / "tritonserver" / "backends"
    done = subprocess.run(
        [sys.executable, "-m", "triton_ort.backend", "install", "--backend-directory", str(missing)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"{missing} does not exist" in done.stderr, done.stderr
    assert not (tmp_path / "opt").exists()
