"""The README's "Serve your own ONNX model" recipe, run as written: its marked code blocks
(`<!-- readme-test: NAME -->` before the fence) in a scratch directory, against a real tritonserver."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.paths import ROOT, demo_onnx
from triton_ort.testing.server import free_port

pytestmark = pytest.mark.integration

BLOCK = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)


def readme_blocks() -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer((ROOT / "README.md").read_text())}


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )


def _wait_ready(http_port: int, server: subprocess.Popen[str], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, f"the README's serve command exited with {server.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    server.send_signal(signal.SIGINT)
    output, _ = server.communicate(timeout=60)
    pytest.fail(f"the README's serve command was not ready after {timeout_s:.0f} s:\n{output[-3000:]}")


def test_readme_blocks_are_marked() -> None:
    assert set(readme_blocks()) >= {"config", "layout", "serve", "expected", "check"}


def test_serve_your_own_onnx_model_recipe(tmp_path: Path) -> None:
    blocks = readme_blocks()
    (tmp_path / "model_repository" / "demo" / "1").mkdir(parents=True)
    shutil.copy(demo_onnx(), tmp_path / "model_repository" / "demo" / "1" / "model.onnx")
    # `python` is this venv's, and the client package comes from the checkout, as in a shell there.
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }

    layout = _run(blocks["layout"], tmp_path, env)
    assert layout.returncode == 0, layout.stderr
    assert (tmp_path / "my_repository" / "my_model" / "config.pbtxt").read_text() == blocks["config"]

    # The serve line as written (its comment dropped), with free ports added: 8000-8002 may be taken.
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    serve = (
        blocks["serve"].partition("#")[0].strip()
        + f" --http-port {http_port} --grpc-port {grpc_port} --metrics-port {metrics_port}"
    )
    server = subprocess.Popen(
        ["bash", "-c", f"exec {serve}"],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_ready(http_port, server)
        expected = _run(f"python - <<'PY'\n{blocks['expected']}PY", tmp_path, env)
        assert expected.returncode == 0, expected.stderr
        check = _run(
            blocks["check"].replace(
                "python -m client.cli", f"python -m client.cli --url 127.0.0.1:{http_port}"
            ),
            tmp_path,
            env,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the README says
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output[-3000:]
