"""Run the real tritonserver on a model repository without Docker, from the nvidia-pytriton wheel.

    python -m triton_ort.testing.server --model-repository model_repository      # foreground, Ctrl-C stops

nvidia-pytriton 0.5.0 bundles tritonserver 2.41.0 (= release 23.12) with its python backend and a stub per
Python 3.8-3.11; 0.7.0 bundles 2.51 with a 3.12 stub. What the python-backend stub needs, learned the
hard way: it ignores PYTHONPATH and takes sys.prefix from the first `python3` on PATH (so this venv's bin
goes first); it needs libpython's directory and nvidia_pytriton.libs on LD_LIBRARY_PATH; and the backend
directory must hold the stub built for the running Python minor version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from triton_ort.backend import install as install_zerocopy_backend

# Header that unlocks the restricted APIs (logging, trace); its value is LocalTritonServer.admin_key.
ADMIN_HEADER = "triton-ort-admin"


class ServerStartError(RuntimeError):
    """tritonserver did not become ready; the message carries its log."""


def _pytriton_paths() -> tuple[Path, Path]:
    """(pytriton's tritonserver distribution, nvidia_pytriton.libs)."""
    try:
        import pytriton
    except ImportError:
        raise ServerStartError(
            "nvidia-pytriton is not installed; `pip install nvidia-pytriton==0.5.0` (Python <= 3.11) "
            "or 0.7.0 (Python 3.12) provides tritonserver"
        ) from None
    package = Path(pytriton.__file__).parent
    return package / "tritonserver", package.parent / "nvidia_pytriton.libs"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def gpu_present() -> bool:
    """Whether this host has an NVIDIA GPU, i.e. whether KIND_AUTO instances will resolve to KIND_GPU."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


@dataclass
class LocalTritonServer:
    """tritonserver as a child process; a context manager that waits for readiness and stops cleanly."""

    model_repository: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    extra_args: Sequence[str] = ()
    startup_timeout_s: float = 120.0
    log_verbose: int = 0
    cuda_memory_pool_bytes: int = 256 << 20
    """Per-GPU pool that carries GPU tensors between server and stub; size it for the tensors in flight."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the server and its stubs (e.g. TRITON_ORT_LOG_LEVEL=DEBUG)."""
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _workdir: Path | None = field(default=None, init=False)
    admin_key: str = field(default_factory=lambda: secrets.token_hex(16), init=False, repr=False)
    """Value of ADMIN_HEADER that the logging and trace APIs require (random per server)."""

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        assert self._workdir is not None
        return self._workdir / "tritonserver.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self._workdir else ""

    def _prepare_backend(self, dist: Path) -> Path:
        """A backend directory: the python backend, the stub for this Python, and onnxruntime_zerocopy."""
        assert self._workdir is not None
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.exists():
            available = sorted(p.name for p in (dist / "python_backend_stubs").iterdir())
            raise ServerStartError(
                f"this nvidia-pytriton has no python-backend stub for Python {version} (it has {available}); "
                "use nvidia-pytriton 0.5.0 for Python 3.8-3.11, 0.7.0 for 3.12"
            )
        backend = self._workdir / "backends" / "python"
        backend.mkdir(parents=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy(dist / "backends" / "python" / name, backend / name)
        shutil.copy(stub, backend / "triton_python_backend_stub")
        # Beside `python`, the Python-based backend it runs: models with backend "onnxruntime_zerocopy".
        install_zerocopy_backend(backend.parent)
        return backend.parent

    def _environment(self, libs: Path) -> dict[str, str]:
        env = {**os.environ, **self.env}
        library_dirs = [sysconfig.get_config_var("LIBDIR") or "", str(libs), env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = ":".join(d for d in library_dirs if d)
        # The stub's embedded interpreter finds its packages through the first python3 on PATH.
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        return env

    def command(self, dist: Path, backend_dir: Path) -> list[str]:
        args = [
            str(dist / "bin" / "tritonserver"),
            f"--model-repository={self.model_repository.resolve()}",
            f"--backend-directory={backend_dir}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            # A unique shared-memory prefix lets several servers (tests, benchmarks) run side by side.
            f"--backend-config=python,shm-region-prefix-name=triton_ort_{uuid.uuid4().hex[:8]}_",
            f"--log-verbose={self.log_verbose}",
            "--exit-timeout-secs=10",
            # Triton 23.12 lets any client that reaches a port point the server's log and trace files at
            # any path (created, then appended to): those APIs answer only requests carrying our header.
            f"--http-restricted-api=logging,trace:{ADMIN_HEADER}={self.admin_key}",
            f"--grpc-restricted-protocol=logging,trace:{ADMIN_HEADER}={self.admin_key}",
        ]
        if gpu_present():
            # GPU tensors travel between server and stub through this pool; below the tensors' size the
            # python backend falls back to slower per-buffer CUDA IPC.
            args.append(f"--cuda-memory-pool-byte-size=0:{self.cuda_memory_pool_bytes}")
        return [*args, *self.extra_args]

    def start(self) -> LocalTritonServer:
        dist, libs = _pytriton_paths()
        self._workdir = Path(tempfile.mkdtemp(prefix="triton_ort_server_"))
        backend_dir = self._prepare_backend(dist)
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                self.command(dist, backend_dir),
                env=self._environment(libs),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it in order
            )
        self._wait_ready()
        return self

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"tritonserver exited with code {self.process.returncode} while starting")
            if self.is_ready():
                return
            time.sleep(0.25)
        self._fail(f"tritonserver was not ready after {self.startup_timeout_s:.0f} s")

    def _fail(self, reason: str) -> None:
        log = self.log()
        self.stop()
        raise ServerStartError(f"{reason}; its log:\n{log}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (Triton drains in-flight requests), then SIGKILL if it does not exit in time."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> LocalTritonServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def running_server(model_repository: Path, **kwargs: object) -> Iterator[LocalTritonServer]:
    with LocalTritonServer(model_repository, **kwargs) as server:  # type: ignore[arg-type]
        yield server


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a model repository with the local tritonserver.")
    parser.add_argument(
        "--model-repository", type=Path, default=Path(os.environ.get("MODEL_REPOSITORY", "model_repository"))
    )
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--log-verbose", type=int, default=0)
    parser.add_argument("extra", nargs="*", help="more tritonserver arguments, after --")
    args = parser.parse_args()
    server = LocalTritonServer(
        args.model_repository,
        args.http_port,
        args.grpc_port,
        args.metrics_port,
        args.extra,
        log_verbose=args.log_verbose,
    )
    try:
        server.start()
    except ServerStartError as error:
        sys.exit(str(error))
    print(f"tritonserver ready: HTTP {server.http_url}, gRPC {server.grpc_url}; log {server.log_path}")
    print("Ctrl-C stops it.", flush=True)
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        print("stopping tritonserver ...", flush=True)
    finally:
        code = server.stop()
        print(server.log()[-4000:])
    sys.exit(0 if code in (0, -signal.SIGTERM, None) else code)


if __name__ == "__main__":
    main()
