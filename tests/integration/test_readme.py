"""The README's "Serve your own ONNX model" recipe, run as written: its marked code blocks
(`<!-- readme-test: NAME -->` before the fence) in a scratch directory outside the checkout, with the
installed `triton-ort` command, against a real tritonserver."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

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
    assert set(readme_blocks()) >= {"config", "layout", "completed", "serve", "expected", "check"}


def _checkout_files() -> set[str]:
    """Untracked files of the checkout that git does not ignore: what the recipe must not write."""
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    return set(listed.stdout.splitlines())


def test_serve_your_own_onnx_model_recipe(tmp_path: Path) -> None:
    """From a folder outside the checkout, in the venv as `activate` sets it up: its bin first on PATH,
    no PYTHONPATH, so `triton-ort` and `python` are the venv's and nothing comes from the checkout."""
    blocks = readme_blocks()
    shutil.copy(demo_onnx(), tmp_path / "your_model.onnx")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", VIRTUAL_ENV=sys.prefix)
    before = _checkout_files()

    layout = _run(blocks["layout"], tmp_path, env)
    assert layout.returncode == 0, layout.stderr
    assert (tmp_path / "my_repository" / "my_model" / "config.pbtxt").read_text() == blocks["config"]

    completed = _run(blocks["completed"], tmp_path, env)
    assert completed.returncode == 0, completed.stderr
    offline = text_format.Parse(completed.stdout, model_config_pb2.ModelConfig())
    assert [(t.name, list(t.dims)) for t in offline.input] == [("np_script_embeddings", [2010])]
    assert (
        offline.max_batch_size == 8
        and offline.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"
    )

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
        served = _served_config(http_port, "my_model")
        expected = _run(f"python - <<'PY'\n{blocks['expected']}PY", tmp_path, env)
        assert expected.returncode == 0, expected.stderr
        check = _run(
            blocks["check"].replace("triton-ort infer", f"triton-ort infer --url 127.0.0.1:{http_port}"),
            tmp_path,
            env,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the README says
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output[-3000:]
    # The headline config's third line reaches the python backend: the served config carries it.
    assert served.get("parameters", {}).get("FORCE_CPU_ONLY_INPUT_TENSORS") == {"string_value": "no"}, served
    # Auto-complete's inputs and outputs are what `triton-ort config` printed offline.
    assert [(t["name"], [int(d) for d in t["dims"]]) for t in served["input"]] == [
        (t.name, list(t.dims)) for t in offline.input
    ]
    assert [t["name"] for t in served["output"]] == [t.name for t in offline.output]
    assert _checkout_files() <= before, f"the recipe wrote into the checkout: {_checkout_files() - before}"


def _served_config(http_port: int, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{http_port}/v2/models/{model}/config", timeout=10
    ) as reply:
        return dict(json.load(reply))
