"""The probe behind the healthcheck, the liveness probe and the watchdog (src/triton_ort/probe.py), against
the real tritonserver: it passes while every model answers, fails while a model's stub is gone or a model
does not answer, though `/v2/health/live` still says yes, and the watchdog kills such a server so that its
restart policy can start it again (docs/reliability.md, "A safety net")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.repository import build_test_repository
from triton_ort.harness.processes import alive, stub_processes
from triton_ort.harness.repository import ModelSpec, TensorSpec, add_model
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.waiting import wait_for

pytestmark = pytest.mark.integration

# A plain python model that stops answering while a file named `stall` lies beside it, as a hung custom op
# or a deadlocked device would: its execute sleeps far past any probe's timeout (time.sleep keeps the stub
# healthy in the python backend's eyes, so only a probe that infers can tell).
STALLING_MODEL_PY = """
import pathlib, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        while (pathlib.Path(__file__).parent / "stall").exists():
            time.sleep(0.2)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x")
                .as_numpy())]) for r in requests]
"""
STALLING = ModelSpec("stalling", (TensorSpec("x", "FP32", (4,)),), (TensorSpec("y", "FP32", (4,)),))


def run_probe(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "triton_ort.probe", "--url", url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def server_pid(server: LocalTritonServer) -> int:
    assert server.process is not None
    return server.process.pid


def live(url: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/health/live", timeout=10) as reply:
        return int(reply.status)


@pytest.fixture()
def repository(tmp_path: Path) -> Path:
    build_test_repository(tmp_path / "repository")
    add_model(tmp_path / "repository", STALLING, STALLING_MODEL_PY)
    return tmp_path / "repository"


def test_every_model_answers_then_a_stopped_stub_fails_the_probe_while_the_server_is_live(
    repository: Path,
) -> None:
    with LocalTritonServer(repository) as server:
        passed = run_probe(server.http_url)
        assert passed.returncode == 0, passed.stderr
        for model in ("demo", "multi_io", "gather", "stalling"):
            assert f"probe: {model}: answered" in passed.stdout

        stubs = [pid for pid, path in stub_processes(server_pid(server)).items() if "/demo/" in path]
        for pid in stubs:
            os.kill(pid, signal.SIGSTOP)
        try:
            failed = run_probe(server.http_url, "--model", "demo", "--timeout", "3")
            assert live(server.http_url) == 200  # what a liveness probe on /v2/health/live sees
        finally:
            for pid in stubs:
                if alive(pid):
                    os.kill(pid, signal.SIGCONT)
        assert failed.returncode == 1
        # 2.41 and 2.51 both call a stopped stub dead ("Stub process 'demo_0_0' is not healthy")
        assert "probe: demo: its stub is dead" in failed.stderr and "not healthy" in failed.stderr


def test_a_model_that_stops_answering_fails_the_probe_by_its_timeout(repository: Path) -> None:
    with LocalTritonServer(repository) as server:
        (repository / "stalling" / "1" / "stall").touch()
        try:
            started = time.monotonic()
            failed = run_probe(server.http_url, "--timeout", "2")
            took = time.monotonic() - started
        finally:
            (repository / "stalling" / "1" / "stall").unlink()
        assert failed.returncode == 1
        assert "probe: stalling: no answer within 2 s" in failed.stderr
        assert "probe: demo: answered" in failed.stdout  # the other models are probed beside it, not after
        assert took < 10, f"the probe took {took:.1f} s"


def test_the_watchdog_kills_a_server_whose_model_stopped_answering_and_only_then(repository: Path) -> None:
    with LocalTritonServer(repository) as server:
        pid = server_pid(server)
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "triton_ort.probe", "--url", server.http_url, "--watch", str(pid),
             "--interval", "0.5", "--failures", "2", "--timeout", "1"],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(4)  # several probes that pass: nothing is killed
            assert alive(pid) and watchdog.poll() is None
            (repository / "stalling" / "1" / "stall").touch()
            wait_for(lambda: not alive(pid), 60, "the watchdog to kill tritonserver", interval_s=0.2)
            assert watchdog.wait(timeout=30) == 1
            said = watchdog.stderr.read() if watchdog.stderr else ""
            assert "stalling did not answer 2 probes in a row (no answer within 1 s)" in said
            assert f"killing tritonserver (pid {pid})" in said
            assert said.index(f"probe: watching tritonserver (pid {pid})") < said.index("did not answer")
        finally:
            (repository / "stalling" / "1" / "stall").unlink(missing_ok=True)
            watchdog.kill()
            watchdog.wait()
