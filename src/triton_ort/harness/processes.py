"""tritonserver's process tree and its memory, on psutil: the stubs, their RSS and GPU memory, zombies."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

MIB = 1024 * 1024
STUB_NAME = "triton_python_backend_stub"


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), zombies included; [] once it has gone."""
    try:
        return sorted(child.pid for child in psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def alive(pid: int) -> bool:
    """Running (a zombie, reaped or not, is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def zombies(pid: int) -> list[int]:
    """Processes below `pid` that have exited and that nobody has reaped."""
    return [child for child in descendants(pid) if psutil.pid_exists(child) and not alive(child)]


def stub_processes(server_pid: int) -> dict[int, str]:
    """The living python-backend stubs of one tritonserver: pid -> the model.py it runs."""
    stubs = {}
    for pid in descendants(server_pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            command = psutil.Process(pid).cmdline()
            if command and Path(command[0]).name == STUB_NAME and alive(pid):
                stubs[pid] = command[1] if len(command) > 1 else "?"
    return stubs


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (0 once it has gone)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return 0


def gpu_memory_by_pid() -> dict[int, int] | None:
    """GPU memory each process holds (bytes), from nvidia-smi; None where there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        reply = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used: dict[int, int] = {}
    for line in reply.splitlines():
        pid_text, _, mib_text = line.partition(",")
        with contextlib.suppress(ValueError):
            used[int(pid_text)] = used.get(int(pid_text), 0) + int(mib_text) * MIB
    return used


@dataclass(frozen=True)
class MemorySnapshot:
    """RSS (and GPU memory, where measurable) of tritonserver and everything below it."""

    rss: dict[int, int]
    gpu: dict[int, int] | None

    @property
    def rss_total(self) -> int:
        return sum(self.rss.values())

    @property
    def gpu_total(self) -> int | None:
        return None if self.gpu is None else sum(self.gpu.values())

    @classmethod
    def of(cls, server_pid: int, with_gpu: bool = True) -> MemorySnapshot:
        """Read now; `with_gpu=False` skips nvidia-smi (gpu None), for frequent RSS-only readings."""
        pids = [server_pid, *descendants(server_pid)]
        gpu = gpu_memory_by_pid() if with_gpu else None
        return cls(
            rss={pid: rss_bytes(pid) for pid in pids},
            gpu=None if gpu is None else {pid: gpu.get(pid, 0) for pid in pids},
        )
