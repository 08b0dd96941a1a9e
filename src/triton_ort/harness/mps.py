"""A private CUDA MPS control daemon for one tritonserver (`LocalTritonServer(mps=True)`, `--mps`).

Without MPS the server and each python-backend stub have CUDA contexts of their own, and the GPU swaps
between them: at concurrency 1 on an H200 one small kernel in a stub added ~350 µs to every request, and
MPS, where every process is a client of one MPS server, took ~200 µs of that back (docs/benchmarks.md,
"What using the GPU in the stub costs"). The daemon's pipe and log folders are the server's own, so it
meets no other daemon (nor the host's, at /tmp/nvidia-mps); `quit` at stop ends it and its MPS server.
The daemon forks away from the launcher (`-d`), so a launcher killed by SIGKILL leaves it running until
the next launcher starts and stops it (remove_orphaned_daemons).
They are in /tmp itself, not in the launcher's work folder: the daemon's UNIX sockets need a short path
(108 bytes at most), which a work folder under pytest's temp folder can exceed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MPS_CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
FOLDER_PREFIX = "triton_ort_mps_"


def _short_temp_dir() -> str:
    return "/tmp" if os.access("/tmp", os.W_OK) else tempfile.gettempdir()


class MpsError(RuntimeError):
    """The MPS control daemon could not be started: the message says why and what to do."""


@dataclass
class MpsDaemon:
    """One control daemon whose pipes and logs live in a folder of its own (the launcher's pid in its
    name, so that a later launcher can stop it if this one dies by SIGKILL: remove_orphaned_daemons)."""

    start_timeout_s: float = 10.0
    folder: Path = field(
        default_factory=lambda: Path(
            tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}_", dir=_short_temp_dir())
        )
    )

    @property
    def env(self) -> dict[str, str]:
        """What tritonserver (and so its stubs) needs in its environment to be a client of this daemon."""
        return {PIPE_ENV: str(self.folder / "pipe"), LOG_ENV: str(self.folder / "log")}

    def start(self) -> None:
        binary = shutil.which(MPS_CONTROL)
        if binary is None:
            raise MpsError(
                f"{MPS_CONTROL} is not on PATH: it comes with the NVIDIA driver's utilities (in a "
                "container: NVIDIA_DRIVER_CAPABILITIES=compute,utility); serve without MPS instead"
            )
        for folder in self.env.values():
            Path(folder).mkdir(parents=True, exist_ok=True)
        # No pipes to it: a daemon that kept them open would hold this call until it exits.
        try:
            started = subprocess.run(
                [binary, "-d"],
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            log = self._log_tail()
            self.stop()
            raise MpsError(f"{MPS_CONTROL} -d did not return within 30 s: {log}") from None
        if started.returncode:
            raise MpsError(f"{MPS_CONTROL} -d failed ({started.returncode}): {self._log_tail()}")
        # `-d` returns once it has forked; the daemon answers its control pipe a moment later.
        deadline = time.monotonic() + self.start_timeout_s
        while self.control("get_server_list") is None:
            if time.monotonic() > deadline:
                log = self._log_tail()  # before stop() removes the folder
                self.stop()
                raise MpsError(
                    f"the MPS control daemon did not answer within {self.start_timeout_s:.0f} s: {log}"
                )
            time.sleep(0.05)

    def control(self, command: str) -> str | None:
        """Send the daemon one command; its answer, or None when it did not answer."""
        binary = shutil.which(MPS_CONTROL)
        if binary is None:
            return None
        try:
            answer = subprocess.run(
                [binary],
                input=command + "\n",
                env=self._environment(),
                capture_output=True,
                text=True,
                timeout=10,
            )
        except subprocess.TimeoutExpired:
            return None
        return answer.stdout if answer.returncode == 0 else None

    def client_pids(self) -> set[int]:
        """The processes that are clients of this daemon's MPS servers now."""
        pids: set[int] = set()
        for server in (self.control("get_server_list") or "").split():
            for client in (self.control(f"get_client_list {server}") or "").split():
                if client.isdigit():
                    pids.add(int(client))
        return pids

    def stop(self, timeout_s: float = 10.0) -> None:
        """Quit the daemon (it ends its MPS server), then end whatever of it is left. Call it after the
        clients (tritonserver and its stubs) have exited."""
        if daemon_processes(self.folder):
            self.control("quit")
        stop_daemons(self.folder, timeout_s)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _environment(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def _log_tail(self) -> str:
        log = Path(self.env[LOG_ENV]) / "control.log"
        with contextlib.suppress(OSError):
            return " | ".join(log.read_text(errors="replace").splitlines()[-5:]) or "no log"
        return "no log"


def daemon_processes(folder: Path) -> list[psutil.Process]:
    """The living MPS control daemons and servers whose pipe folder lies inside `folder` (an exited one
    that nobody has reaped yet, a zombie, does not count)."""
    found = []
    for process in psutil.process_iter(["name", "status"]):
        if not (process.info["name"] or "").startswith("nvidia-cuda-mps"):
            continue
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error):
            pipe = process.environ().get(PIPE_ENV, "")
            if pipe and Path(pipe).is_relative_to(folder):
                found.append(process)
    return found


def stop_daemons(folder: Path, timeout_s: float = 10.0) -> None:
    """Let the daemons of `folder` exit (after `quit`), then kill what is left: a launcher that was killed
    leaves its daemon behind, and the next launcher removes it with the folder."""
    deadline = time.monotonic() + timeout_s
    while (left := daemon_processes(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()


def remove_orphaned_daemons(alive: Callable[[int], bool]) -> None:
    """Stop the daemons, and remove the folders, of launchers that died without stopping them."""
    for folder in Path(_short_temp_dir()).glob(f"{FOLDER_PREFIX}*_*"):
        pid_text = folder.name.removeprefix(FOLDER_PREFIX).split("_", 1)[0]
        with contextlib.suppress(OSError):
            if folder.stat().st_uid == os.getuid() and pid_text.isdigit() and not alive(int(pid_text)):
                MpsDaemon(folder=folder).stop()
