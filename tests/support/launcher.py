"""`triton-ort serve` as a user starts it: a process of its own session, its output read line by line
(tests/integration/test_launcher.py, test_mixed_repository.py)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.paths import ROOT

LAUNCHER = [sys.executable, "-m", "triton_ort.cli", "serve"]
READY = "tritonserver ready"


@dataclass
class Launched:
    """The CLI launcher as a process of its own session, its output read line by line."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put(line.rstrip("\n"))

    def wait_for_line(self, needle: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(
            f"no line with {needle!r} within {timeout_s} s; output so far:\n" + self.output()
        )

    def output(self) -> str:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "\n".join(self.seen)

    def server(self) -> psutil.Process:
        """The tritonserver this launcher started (its direct child)."""
        children = [p for p in psutil.Process(self.process.pid).children() if p.name() == "tritonserver"]
        assert len(children) == 1, children
        return children[0]


def launch(
    command: Sequence[str], tmpdir: Path, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Launched:
    """Start `command` in a session of its own with TMPDIR=tmpdir, so that everything it leaves in
    the temp dir is visible, and nothing of other runs on this machine."""
    tmpdir.mkdir(exist_ok=True)
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmpdir), **(env or {})},
        start_new_session=True,
    )
    launched = Launched(process)
    threading.Thread(target=launched._pump, args=(process.stdout,), daemon=True).start()
    return launched


def launcher_command(repository: Path, ports: tuple[int, int, int]) -> list[str]:
    http, grpc, metrics = ports
    return [
        *LAUNCHER,
        f"--model-repository={repository}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
    ]
