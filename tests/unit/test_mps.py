"""The launcher's private MPS daemon (triton_ort.harness.mps) against a stand-in nvidia-cuda-mps-control:
started with its own pipe folder, waited for, quit at stop, and stopped by a later launcher when the one
that started it was killed. The real daemon serving a real server: tests/gpu/test_mps_gpu.py."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from triton_ort.harness import processes
from triton_ort.harness.mps import PIPE_ENV, MpsDaemon, MpsError, daemon_processes, remove_orphaned_daemons

# Daemon mode forks a child that stays (named after this script, as the real daemon is) and answers
# through a file in the pipe folder; client mode answers while that child lives, and `quit` ends it.
FAKE_CONTROL = f"""#!{sys.executable}
import os, signal, sys, time
pid_file = os.path.join(os.environ["{PIPE_ENV}"], "fake.pid")
if sys.argv[1:] == ["-d"]:
    if os.fork() == 0:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        with open(pid_file, "w") as out:
            out.write(str(os.getpid()))
        time.sleep(600)
    sys.exit(0)
try:
    pid = int(open(pid_file).read())
    os.kill(pid, 0)
except (OSError, ValueError):
    sys.exit(1)  # as the real one: no daemon to talk to
if sys.stdin.read().strip() == "quit":
    os.kill(pid, signal.SIGTERM)
"""


@pytest.fixture
def fake_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(FAKE_CONTROL)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return script


def test_a_daemon_of_its_own_is_started_and_quit(fake_control: Path) -> None:
    daemon = MpsDaemon()
    daemon.start()
    try:
        assert Path(daemon.env[PIPE_ENV]).is_relative_to(daemon.folder)
        assert len(daemon.folder.as_posix()) < 60  # its sockets' paths must stay short
        assert len(daemon_processes(daemon.folder)) == 1
    finally:
        daemon.stop()
    assert daemon_processes(daemon.folder) == []
    assert not daemon.folder.exists()


def test_a_daemon_left_by_a_killed_launcher_is_stopped_by_the_next(fake_control: Path) -> None:
    daemon = MpsDaemon()
    daemon.start()
    assert daemon_processes(daemon.folder)
    # As if this launcher had died; the launchers that really live (another test run's) stay alive.
    remove_orphaned_daemons(alive=lambda pid: pid != os.getpid() and processes.alive(pid))
    assert daemon_processes(daemon.folder) == []
    assert not daemon.folder.exists()


def test_no_control_binary_says_where_it_comes_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    daemon = MpsDaemon()
    with pytest.raises(MpsError, match=r"nvidia-cuda-mps-control is not on PATH.*NVIDIA_DRIVER_CAPABILITIES"):
        daemon.start()
    daemon.stop()
    assert not daemon.folder.exists()


def test_serve_takes_mps_as_a_flag() -> None:
    """`triton-ort serve --mps` (and make serve MPS=1) reach LocalTritonServer(mps=True); that path runs
    for real in tests/gpu/test_mps_gpu.py."""
    from triton_ort.cli.serve import build_parser

    assert build_parser().parse_args(["--mps"]).mps is True
    assert build_parser().parse_args([]).mps is False
