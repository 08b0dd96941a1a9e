"""The container tier: the server and client images run as a user runs them, through docker compose.

`make test-container` starts an engine (docker/engine.sh), builds the images on the stand-in base and runs
this. Without an engine, or without the images, every test skips with the one-line reason. One server
container at a time, with `make up-local`'s compose files (docker/compose.local.yaml: host networking, bound
to 127.0.0.1) on ports 18500-18502, so that it cannot collide with a server on 8000-8002.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The CLI docker/engine.sh uses (`make test-container` exports it as DOCKER).
DOCKER = (
    os.environ.get("DOCKER")
    or subprocess.run([str(REPO / "docker/engine.sh"), "cli"], capture_output=True, text=True).stdout.strip()
)
PROJECT = "triton-ort-test"
PORTS = {"HTTP_PORT": "18500", "GRPC_PORT": "18501", "METRICS_PORT": "18502"}
HTTP_URL = f"127.0.0.1:{PORTS['HTTP_PORT']}"
GRPC_URL = f"127.0.0.1:{PORTS['GRPC_PORT']}"
IMAGES = ("triton-ort/server:23.12", "triton-ort/client:latest")
BASE_FILES = ("docker/compose.yaml", "docker/compose.cpu.yaml", "docker/compose.local.yaml")


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
        ports = {f"TRITON_ORT_{name}": port for name, port in PORTS.items()}
        self.env = {**os.environ, **ports, "TRITON_ORT_MEMLOCK": str(_memlock_limit()), **(env or {})}

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


TWO_LINES = 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n'


def repository(root: Path, name: str, onnx: bytes) -> Path:
    """A repository of one model with the README's two-line config; readable by the container's uid 1000."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(TWO_LINES)
    (root / name / "1" / "model.onnx").write_bytes(onnx)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


MAKE_VARIABLES = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")


def make(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the checkout, as a user runs it; on a timeout its whole process group is killed."""
    process = subprocess.Popen(
        ["make", "--no-print-directory", *args],
        cwd=REPO,
        # as from a shell, not as a sub-make of `make test-container`
        env={**{k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        ran = f"make {' '.join(args)} ran past {timeout} s"
        raise AssertionError(f"{ran}:\n{stdout[-2000:]}\n{stderr[-2000:]}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


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
