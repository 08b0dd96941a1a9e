"""The container tier: the server and client images run as a user runs them, through docker compose.

`make test-container` starts an engine (docker/engine.sh), builds the images on the stand-in base and runs
this. Without an engine, or without the images, every test skips with the one-line reason. One server
container at a time, host networking on 127.0.0.1:18500-18502 (tests/container/compose.test.yaml).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")
PROJECT = "triton-ort-test"
HTTP_URL = "127.0.0.1:18500"
GRPC_URL = "127.0.0.1:18501"
IMAGES = ("triton-ort/server:23.12", "triton-ort/client:latest")
BASE_FILES = ("docker/compose.yaml", "docker/compose.cpu.yaml", "tests/container/compose.test.yaml")


def _blocker() -> str | None:
    check = subprocess.run([str(REPO / "docker/engine.sh"), "check"], capture_output=True, text=True)
    line = (check.stdout or check.stderr).strip()
    if check.returncode != 0:
        return line
    if "ready" not in line:
        return f"no Docker engine running ({line}); `make test-container` starts one"
    missing = [
        i for i in IMAGES if subprocess.run([DOCKER, "image", "inspect", i], capture_output=True).returncode
    ]
    if missing:
        return f"images {missing} not built: `make docker-images`"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    if not ours:
        return
    reason = _blocker()
    if reason:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


def _memlock_limit() -> int | str:
    """This machine's hard RLIMIT_MEMLOCK: the most a container can be given (-1: unlimited)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


class Compose:
    """docker compose on the tier's project, with the CPU and host-network overrides plus `extra` files."""

    def __init__(self, extra: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.files = [*BASE_FILES, *extra]
        self.env = {**os.environ, "TRITON_ORT_TEST_MEMLOCK": str(_memlock_limit()), **(env or {})}

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        command = [DOCKER, "compose", "-p", PROJECT]
        for file in self.files:
            command += ["-f", file]
        return subprocess.run(
            [*command, *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def up(self, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self("up", "--no-build", "--detach", "--wait", "triton", check=check, timeout=400)

    def down(self) -> None:
        self("down", "--volumes", "--remove-orphans", "--timeout", "60", check=False, timeout=180)

    def container(self) -> str:
        return self("ps", "--all", "--quiet", "triton").stdout.strip()

    def logs(self) -> str:
        return self("logs", "--no-color", "triton", check=False).stdout


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, timeout=timeout)


def inspect(container: str, template: str) -> str:
    return docker("inspect", "--format", template, container).stdout.strip()


@pytest.fixture(scope="module")
def served() -> Iterator[Compose]:
    """The default path (`make up` with the CPU override): the image's own /models, healthy."""
    compose = Compose()
    compose.down()
    try:
        result = compose.up(check=False)
        assert result.returncode == 0, f"compose up failed:\n{result.stderr}\n{compose.logs()[-3000:]}"
        yield compose
    finally:
        compose.down()
