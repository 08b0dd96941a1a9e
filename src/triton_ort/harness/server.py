"""Run the real tritonserver on a model repository without Docker, from the nvidia-pytriton wheel.

    triton-ort serve --model-repository model_repository      # foreground, Ctrl-C stops
    python -m triton_ort.cli serve ...                      # the same

nvidia-pytriton 0.5.0 bundles tritonserver 2.41.0 (= release 23.12) with its python backend and a stub per
Python 3.8-3.11; 0.7.0 bundles 2.51 with a 3.12 stub. What the python-backend stub needs, learned the
hard way: it ignores PYTHONPATH and takes sys.prefix from the first `python3` on PATH (so this venv's bin
goes first); it needs libpython's directory and nvidia_pytriton.libs on LD_LIBRARY_PATH; and the backend
directory must hold the stub built for the running Python minor version.

The launcher never leaves a server behind:
- SIGTERM, SIGINT and SIGHUP to the CLI stop tritonserver gracefully (SIGTERM: Triton drains for
  --exit-timeout-secs), then SIGKILL its process group after a bound; a second signal kills at once.
- tritonserver runs in its own session (a terminal's Ctrl-C or a harness's killpg reaches the launcher
  only, which stops the server in order), and is bound to the launcher with Linux's PR_SET_PDEATHSIG:
  when the launcher dies, even by SIGKILL, the kernel sends tritonserver SIGTERM. The kernel sends it when
  the *thread* that started the server exits, so start servers from a thread that outlives them.
- The temporary work folder (backend directory, log) and the python backend's shared-memory regions
  (a unique shm-region-prefix-name per server) are removed on every stop; a failed start keeps its log
  file and names it. The folder of a launcher killed by SIGKILL is removed by the next launcher.
Readiness counts only while our own process lives and its own log says that its own services started on
our ports, then /v2/health/ready answers: another server on the same ports is never mistaken for ours.
Before starting, the model repository is checked (config.pbtxt, version folder, the backend's name,
model.py, ONNX file; triton_ort.harness.checks.check_model) so that a missing file fails in a second,
naming its path, and a misspelt backend names the closest one, instead of after Triton's load timeouts.
"""

from __future__ import annotations

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_ort.backend import install as install_zerocopy_backend
from triton_ort.harness.checks import (
    PYTHON_BACKENDS,
    ServerStartError,
    backend_folders,
    check_repository,
    load_errors,
    models_loaded_at_start,
    option_values,
    own_shm_prefix_is_safe,
    repository_problems,
    server_backends,
    without_option,
)
from triton_ort.harness.mps import MpsDaemon, MpsError, remove_orphaned_daemons
from triton_ort.harness.processes import alive

# Header that unlocks the restricted APIs (logging, trace); its value is LocalTritonServer.admin_key.
ADMIN_HEADER = "triton-ort-admin"

WORKDIR_PREFIX = "triton_ort_server_"
FAILED_LOG_PREFIX = "tritonserver_failed_start_"
SHM_DIR = Path("/dev/shm")
# Triton's own drain bound: after SIGTERM it waits this long for in-flight requests, then exits anyway.
EXIT_TIMEOUT_S = 10
# How long a start may take before the launcher gives up: 23 models on a busy 2-core machine took longer
# than 120 s. The CLI's --startup-timeout, or this variable, raises it.
STARTUP_TIMEOUT_ENV = "TRITON_ORT_STARTUP_TIMEOUT_S"
DEFAULT_STARTUP_TIMEOUT_S = 120.0
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
NGC_BACKEND_DIRECTORY = Path("/opt/tritonserver/backends")
"""Where NGC's tritonserver images keep their backends (onnxruntime, tensorrt, pytorch, ...)."""
CORE_LIBRARY = "libtritonserver.so"
"""The name backends built the usual way link Triton's core against; nvidia-pytriton ships the core renamed
(nvidia_pytriton.libs/libtritonserver-<hash>.so), so the launcher links this name to it."""

# Triton's log lines this launcher reads (stable across 2.41 and 2.51: core/src/model_lifecycle.cc,
# server/src/grpc/grpc_server.cc, server/src/http_server.cc). Release-specific wording lives here only.
SERVICE_STARTED = {
    "grpc": "Started GRPCInferenceService at {address}:{port}",
    "http": "Started HTTPService at {address}:{port}",
    "metrics": "Started Metrics Service at {address}:{port}",
}


def exit_on_termination() -> None:
    """For a command that starts servers: SIGTERM and SIGHUP unwind it like Ctrl-C does, so its `finally`
    blocks and context managers stop those servers and remove their folders (by default both signals end
    the process on the spot)."""

    def unwind(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, unwind)


def kill_group(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a server's process group (tritonserver and its stubs), without waiting."""
    if process is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


# The readiness probe talks to 127.0.0.1 directly: an http_proxy from the environment would answer instead.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def remove_orphaned_workdirs() -> None:
    """Remove the temp-dir work folders of our launchers that died without cleaning up (SIGKILL leaves
    them: nobody is left to remove them). A folder counts as orphaned when it is ours (same user) and the
    pid in its name is not running; a reused pid keeps its folder until that process ends too."""
    for folder in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*_*"):
        pid_text = folder.name.removeprefix(WORKDIR_PREFIX).split("_", 1)[0]
        with contextlib.suppress(OSError):
            ours = folder.stat().st_uid == os.getuid()
            if ours and pid_text.isdigit() and not alive(int(pid_text)):
                shutil.rmtree(folder)
    remove_orphaned_daemons(alive)  # an MPS daemon (--mps) outlives a launcher killed by SIGKILL


def _grpc_ready(url: str, health: str = "ready") -> bool:
    """ServerReady (or ServerLive) over gRPC, bypassing any http_proxy/grpc_proxy (our server is on
    loopback)."""
    client = grpcclient.InferenceServerClient(url, channel_args=[("grpc.enable_http_proxy", 0)])
    try:
        ask = client.is_server_live if health == "live" else client.is_server_ready
        return bool(ask(client_timeout=2))
    except InferenceServerException:
        return False
    finally:
        client.close()


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


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """`count` different ports free on 127.0.0.1 now, none of them in `avoid`. Each probe stays bound until
    all are chosen: a probe closed before the next one binds lets the kernel hand out the same port again
    (three free_port() calls in a row once gave HTTP and gRPC one port, and tritonserver refused to start)."""
    with contextlib.ExitStack() as probes:
        ports: list[int] = []
        while len(ports) < count:
            probe = probes.enter_context(socket.socket())
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
            if port not in avoid:
                ports.append(port)
        return ports


def free_port() -> int:
    """One port free on 127.0.0.1 now; for several at once, free_ports (they differ)."""
    return free_ports(1)[0]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on (or holds) host:port. SO_REUSEADDR as servers set it, so a port that
    only lingers in TIME_WAIT after a previous server counts as free."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def gpu_present() -> bool:
    """Whether this host has an NVIDIA GPU, i.e. whether KIND_AUTO instances will resolve to KIND_GPU."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


# --- the launcher -------------------------------------------------------------------------------------

# Run by the launcher's child instead of tritonserver itself: asks the kernel for SIGTERM when the
# launcher dies (prctl(PR_SET_PDEATHSIG) survives execve), checks that the launcher did not die before
# that request (then nobody would send it), and execs tritonserver in place (same pid). A separate
# interpreter, not Popen's preexec_fn, which may deadlock when the launcher has threads.
_EXEC_BOUND_TO_LAUNCHER = """
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit("the launcher exited before tritonserver started")
os.execv(sys.argv[2], sys.argv[2:])
"""


@dataclass
class LocalTritonServer:
    """tritonserver as a child process; a context manager that waits for readiness and stops cleanly."""

    model_repository: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    extra_args: Sequence[str] = ()
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    log_verbose: int = 0
    cuda_memory_pool_bytes: int = 256 << 20
    """Per-GPU pool that carries GPU tensors between server and stub; size it for the tensors in flight."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the server and its stubs (e.g. TRITON_ORT_LOG_LEVEL=DEBUG)."""
    log_file: Path | None = None
    """Where the server log goes and stays; by default in the work folder, removed at stop (kept and
    named when the start fails)."""
    backends: Mapping[str, Path] = field(default_factory=dict)
    """Other backends to serve beside the python backend and ours: name -> the folder that holds
    libtriton_<name>.so (built for this tritonserver's release; the native onnxruntime backend of an NGC
    image: {"onnxruntime": NGC_BACKEND_DIRECTORY / "onnxruntime"}) or model.py (a Python-based backend),
    linked into this server's backend directory. A --backend-directory among extra_args adds each backend
    folder it holds the same way (instead of replacing the launcher's directory and its python backend)."""
    mps: bool = False
    """Serve as clients of a CUDA MPS daemon of this server's own (triton_ort.harness.mps), started before
    tritonserver and quit after it: the server's and the stubs' GPU work then shares one context."""
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    check_problems: list[str] = field(default_factory=list, init=False)
    """With --exit-on-error=false, what the repository check found (one line a model): those models fail
    their load and the server serves the rest; otherwise the check fails the start."""
    _mps: MpsDaemon | None = field(default=None, init=False)
    _workdir: Path | None = field(default=None, init=False)
    _log_path: Path | None = field(default=None, init=False)
    _final_log: str | None = field(default=None, init=False, repr=False)
    shm_prefix: str | None = field(default_factory=lambda: f"triton_ort_{uuid.uuid4().hex[:8]}_", init=False)
    """The python backend's shared-memory regions are /dev/shm/<shm_prefix>*, removed at stop; None where the
    repository mixes `python` and `onnxruntime_zerocopy` models (own_shm_prefix_is_safe): Triton's default
    names then, which a graceful stop removes and a next server reuses."""
    admin_key: str = field(default_factory=lambda: secrets.token_hex(16), init=False, repr=False)
    """Value of ADMIN_HEADER that the logging and trace APIs require (random per server)."""

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def mps_daemon(self) -> MpsDaemon | None:
        """The MPS daemon this server's processes are clients of (mps=True), while it runs."""
        return self._mps

    @property
    def log_path(self) -> Path:
        assert self._log_path is not None, "the server has not started"
        return self._log_path

    def log(self) -> str:
        if self._final_log is not None:
            return self._final_log
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

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
        for name, folder in self.other_backends().items():
            if not ((folder / f"libtriton_{name}.so").is_file() or (folder / "model.py").is_file()):
                raise ServerStartError(
                    f"backend {name!r}: {folder} holds neither libtriton_{name}.so nor model.py (give the "
                    f"backend's own folder, e.g. {NGC_BACKEND_DIRECTORY / name} in NGC's tritonserver images)"
                )
            (backend.parent / name).symlink_to(folder.resolve(), target_is_directory=True)
        return backend.parent

    def other_backends(self) -> dict[str, Path]:
        """`backends`, and each backend folder of a --backend-directory among the extra arguments (but the
        python backend's own: the launcher's has the stub for this Python)."""
        found = backend_folders(self.extra_args)
        return {**{n: f for n, f in found.items() if n not in PYTHON_BACKENDS}, **self.backends}

    def _core_library_folder(self, libs: Path) -> Path | None:
        """A folder in which CORE_LIBRARY links to the core this tritonserver runs, for the backends that
        link that name (None where `libs` holds it already, or holds no core). The same file: the dynamic
        loader maps it once, so a backend and the server share one core."""
        assert self._workdir is not None
        cores = sorted(libs.glob("libtritonserver*.so"))
        if not cores or (libs / CORE_LIBRARY).exists():
            return None
        folder = self._workdir / "lib"
        folder.mkdir(exist_ok=True)
        (folder / CORE_LIBRARY).unlink(missing_ok=True)
        (folder / CORE_LIBRARY).symlink_to(cores[0])
        return folder

    def _environment(self, libs: Path) -> dict[str, str]:
        env = {**os.environ, **self.env, **(self._mps.env if self._mps else {})}
        core = self._core_library_folder(libs)
        library_dirs = [
            sysconfig.get_config_var("LIBDIR") or "",
            str(libs),
            str(core or ""),
            env.get("LD_LIBRARY_PATH", ""),
        ]
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
            f"--log-verbose={self.log_verbose}",
            f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
            # Triton 23.12 lets any client that reaches a port point the server's log and trace files at
            # any path (created, then appended to): those APIs answer only requests carrying our header.
            f"--http-restricted-api=logging,trace:{ADMIN_HEADER}={self.admin_key}",
            f"--grpc-restricted-protocol=logging,trace:{ADMIN_HEADER}={self.admin_key}",
        ]
        if self.shm_prefix is not None:
            # A unique shared-memory prefix lets several servers (tests, benchmarks) run side by side, and
            # names exactly the regions this server's stop removes (python_backend: shm-region-prefix-name).
            args.append(f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}")
        if gpu_present():
            # GPU tensors travel between server and stub through this pool; below the tensors' size the
            # python backend falls back to slower per-buffer CUDA IPC.
            args.append(f"--cuda-memory-pool-byte-size=0:{self.cuda_memory_pool_bytes}")
        # --backend-directory would replace the launcher's (other_backends links its folders instead)
        return [*args, *without_option(self.extra_args, "--backend-directory")]

    @property
    def serves_what_loads(self) -> bool:
        """tritonserver runs with --exit-on-error=false: it stays up when some models fail to load, and
        under its default --strict-readiness it then never answers ready. So the launcher counts it ready
        once it is live with its services started (Triton starts them after the start-up loads), and
        reports the models that failed (failed_models)."""
        return option_values(self.extra_args, "--exit-on-error")[-1:] in (["false"], ["0"])

    def failed_models(self) -> list[str]:
        """Each model's own load error, from the log (empty when every model loaded)."""
        return [cause for cause in load_errors(self.log()) if cause.startswith("model '")]

    def _ports(self) -> dict[str, int]:
        """The services this server starts, with their ports (--allow-<service>=false turns one off)."""
        ports = {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port}
        return {
            service: port
            for service, port in ports.items()
            if option_values(self.extra_args, f"--allow-{service}")[-1:] not in (["false"], ["0"])
        }

    def _check_ports(self) -> None:
        for service, port in self._ports().items():
            if port_in_use(port):
                raise ServerStartError(
                    f"{service} port {port} on 127.0.0.1 is already in use by another process (another "
                    f"tritonserver?); choose another (--{service}-port, make serve "
                    f"{service.upper()}_PORT=...)",
                    port_conflict=True,
                )

    def start(self) -> LocalTritonServer:
        """Check the repository and ports, start tritonserver and wait until it is ready. Ports left at 0
        are picked free; if another process takes one first, the start is retried on fresh ports."""
        repositories = [
            self.model_repository,
            *(Path(extra) for extra in option_values(self.extra_args, "--model-repository")),
        ]
        loaded = models_loaded_at_start(self.extra_args)
        backends = server_backends(self.extra_args) | set(self.backends)
        if self.serves_what_loads:  # those models fail their load; the rest serve
            self.check_problems = repository_problems(repositories, loaded, backends)
        else:
            check_repository(repositories, loaded, backends)
        python_based = {*PYTHON_BACKENDS}
        python_based |= {name for name, d in self.other_backends().items() if (d / "model.py").is_file()}
        if not own_shm_prefix_is_safe(repositories, python_based):
            self.shm_prefix = None
        requested = (self.http_port, self.grpc_port, self.metrics_port)
        for attempt in range(3):
            fresh = iter(free_ports(sum(not p for p in requested), avoid=requested))
            self.http_port, self.grpc_port, self.metrics_port = (p or next(fresh) for p in requested)
            try:
                return self._start_once()
            except ServerStartError as error:
                if not (error.port_conflict and 0 in requested and attempt < 2):
                    raise
        raise AssertionError("unreachable")

    def _start_once(self) -> LocalTritonServer:
        self._final_log = None
        self.process = None  # a retried start never signals the previous attempt's (reaped) pid
        try:
            self._check_ports()
            dist, libs = _pytriton_paths()
            remove_orphaned_workdirs()
            # the launcher's pid in the name: a later launcher removes it if this one dies by SIGKILL
            self._workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}_"))
            self._log_path = self.log_file or self._workdir / "tritonserver.log"
            backend_dir = self._prepare_backend(dist)
            if self.mps:
                self._mps = MpsDaemon()
                try:
                    self._mps.start()
                except MpsError as error:
                    raise ServerStartError(f"--mps: {error}") from error
            command = self.command(dist, backend_dir)
            if sys.platform.startswith("linux"):
                command = [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _EXEC_BOUND_TO_LAUNCHER,
                    str(os.getpid()),
                    *command,
                ]
            with open(self._log_path, "wb") as log_file:
                self.process = subprocess.Popen(
                    command,
                    env=self._environment(libs),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it in order
                )
            self._wait_ready()
        except BaseException:
            # a failed start, or a signal while starting: nothing may stay behind
            self.stop()
            raise
        return self

    def _services_started(self, log: str) -> bool:
        return all(
            SERVICE_STARTED[service].format(address="127.0.0.1", port=port) in log
            for service, port in self._ports().items()
        )

    def is_ready(self) -> bool:
        """Our own tritonserver is alive, its log shows its services started on our ports, and it
        answers ready: /v2/health/ready over HTTP, or ServerReady over gRPC with --allow-http=false
        (with neither service there is nothing to ask, and the log is the answer)."""
        if self.process is None or self.process.poll() is not None or not self._services_started(self.log()):
            return False
        services = self._ports()
        health = "live" if self.serves_what_loads else "ready"
        if "http" in services:
            try:
                with _NO_PROXY.open(f"http://{self.http_url}/v2/health/{health}", timeout=2) as reply:
                    return bool(reply.status == 200)
            except OSError:
                return False
        if "grpc" in services:
            return _grpc_ready(self.grpc_url, health)
        return True

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"tritonserver exited with code {self.process.returncode} while starting")
            if self.is_ready():
                return
            time.sleep(0.25)
        self._fail(
            f"tritonserver was not ready after {self.startup_timeout_s:.0f} s; allow longer with "
            f"--startup-timeout SECONDS or {STARTUP_TIMEOUT_ENV}"
        )

    def _fail(self, reason: str) -> None:
        """Stop, keep the log file, and raise with the model's own error first."""
        self.stop()
        log = self.log()
        kept = self._log_path
        if kept is None or not kept.exists():
            descriptor, name = tempfile.mkstemp(prefix=FAILED_LOG_PREFIX, suffix=".log")
            with os.fdopen(descriptor, "w") as out:
                out.write(log)
            kept = self._log_path = Path(name)
        causes = load_errors(log)
        summary = (
            "\n".join(causes)
            if causes
            else "no load error in the log; its last lines:\n" + "\n".join(log.splitlines()[-15:])
        )
        raise ServerStartError(
            f"{summary}\n({reason}; full log: {kept})",
            log_path=kept,
            port_conflict=any("already in use" in cause for cause in causes),
        )

    def kill(self) -> None:
        """SIGKILL tritonserver and its stubs (its process group) at once."""
        if self.process is not None and self.process.poll() is None:
            kill_group(self.process)
            self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (Triton drains in-flight requests), then SIGKILL if it does not exit in time; then
        remove its stubs if any outlived it, its shared-memory regions and its work folder."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.kill()
            if self._workdir is not None:  # first stop after this start: stubs share the server's group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
        if self._mps is not None:  # after its clients, the server and the stubs, have gone
            self._mps.stop()
            self._mps = None
        self._clean_up()
        return self.process.returncode if self.process is not None else None

    def _clean_up(self) -> None:
        if self.shm_prefix is not None:
            for region in SHM_DIR.glob(f"{self.shm_prefix}*"):
                region.unlink(missing_ok=True)
        if self._workdir is None:
            return
        self._final_log = self.log()
        if self._log_path is not None and self._log_path.is_relative_to(self._workdir):
            self._log_path = None
        shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None

    def __enter__(self) -> LocalTritonServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
