"""Commands run as a user runs them: from a shell, in a folder outside the checkout, with a venv's `bin`
first on PATH; and the server such a command starts, awaited on its HTTP port and stopped by its pid as
Ctrl-C stops it, on every way out (tests/integration/test_readme.py, test_pip_install.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

STOP_BOUND_S = 60.0


def activated(bin_dir: Path, prefix: Path) -> dict[str, str]:
    """The environment `source <venv>/bin/activate` gives: its bin first on PATH, VIRTUAL_ENV, and no
    PYTHONPATH, so that nothing comes from the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", VIRTUAL_ENV=str(prefix))
    return env


def shell(
    command: str, cwd: Path, env: Mapping[str, str], timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=dict(env),
        text=True,
        capture_output=True,
        timeout=timeout_s,
    )


def ready(http_port: int) -> bool:
    """Whether a server answers /v2/health/ready on this port (refused or reset: not yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def serving(
    command: str, cwd: Path, env: Mapping[str, str], http_port: int, log: Path, timeout_s: float = 180
) -> Iterator[subprocess.Popen[str]]:
    """`command` (a shell line that serves on `http_port`) running until /v2/health/ready answers; its
    output goes to `log`. On the way out, however the block ends: SIGINT to its pid (Ctrl-C), then SIGKILL
    if it has not exited within a bound. Its returncode is there to check after the block."""
    with log.open("w") as output:
        server = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],  # exec: the pid is the command's own
            cwd=cwd,
            env=dict(env),
            text=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not ready(http_port):
            if server.poll() is not None:
                pytest.fail(f"{command!r} exited with {server.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{command!r} was not ready after {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield server
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
