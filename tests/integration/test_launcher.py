"""The local server launcher (triton_ort.harness.server) against the real tritonserver: it never leaves a
server, a temp folder or a shared-memory region behind, never takes another server's readiness for its
own, and puts the failing model's own error first."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.launcher import LAUNCHER, READY, Launched, launch, launcher_command
from tests.support.paths import DEMO_MODEL_PY, ROOT
from tests.support.repository import build_mismatch_repository
from triton_ort.harness.checks import ServerStartError
from triton_ort.harness.server import (
    FAILED_LOG_PREFIX,
    SHM_DIR,
    WORKDIR_PREFIX,
    LocalTritonServer,
    free_ports,
    port_in_use,
)

pytestmark = pytest.mark.integration

# Triton drains for at most --exit-timeout-secs (10 s); the launcher SIGKILLs after 30 s; with a margin
# for the busy machine the tests run on.
STOP_BOUND_S = 45.0


def tiny_repository(repository: Path, name: str = "tiny") -> Path:
    """One python-backend model (an FP32 identity) served by the project's model.py, one CPU instance."""
    version = repository / name / "1"
    version.mkdir(parents=True)
    graphs.identity(version / "model.onnx", TensorProto.FLOAT)
    (version / "model.py").write_bytes(DEMO_MODEL_PY.read_bytes())
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=8)
    for tensors, tensor_name in ((config.input, "x"), (config.output, "y")):
        tensors.add(name=tensor_name, data_type=model_config_pb2.TYPE_FP32, dims=[2])
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=1)
    (repository / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    return repository


def shm_prefix(server: psutil.Process) -> str:
    """The python backend's shared-memory prefix, from tritonserver's command line."""
    for arg in server.cmdline():
        if found := re.search(r"shm-region-prefix-name=(\S+)", arg):
            return found[1]
    raise AssertionError(f"no shm-region-prefix-name in {server.cmdline()}")


def three_ports() -> tuple[int, int, int]:
    """HTTP, gRPC and metrics ports, free now and all different."""
    http, grpc, metrics = free_ports(3)
    return http, grpc, metrics


def launcher_files(tmpdir: Path) -> list[Path]:
    """What the launcher put into the temp dir: work folders and kept logs of failed starts."""
    return sorted(p for p in tmpdir.iterdir() if p.name.startswith((WORKDIR_PREFIX, FAILED_LOG_PREFIX)))


def assert_all_gone(
    processes: list[psutil.Process],
    ports: tuple[int, ...],
    prefix: str,
    tmpdir: Path,
    launcher: subprocess.Popen[str] | None = None,
) -> None:
    """tritonserver and its stubs have exited, the ports are free, nothing stays in /dev/shm, and once
    the launcher has exited nothing of it stays in the temp dir."""
    _, alive = psutil.wait_procs(processes, timeout=STOP_BOUND_S)
    assert alive == [], f"still running {STOP_BOUND_S} s after the stop: {alive}"
    assert [p for p in ports if port_in_use(p)] == []
    assert sorted(SHM_DIR.glob(f"{prefix}*")) == []
    if launcher is not None:
        launcher.wait(timeout=STOP_BOUND_S)
    assert launcher_files(tmpdir) == []


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return tiny_repository(tmp_path / "repository")


def _started(tiny: Path, tmp_path: Path) -> tuple[Launched, tuple[int, int, int], list[psutil.Process], str]:
    ports = three_ports()
    launched = launch(launcher_command(tiny, ports), tmp_path / "tmp")
    ready = launched.wait_for_line(READY, 120)
    assert f"HTTP 127.0.0.1:{ports[0]}, gRPC 127.0.0.1:{ports[1]}" in ready, ready
    server = launched.server()
    stubs = server.children(recursive=True)
    assert [p.name() for p in stubs] == ["triton_python_backend_stub"], stubs
    assert sorted(SHM_DIR.glob(f"{shm_prefix(server)}*")) != []  # the regions the stop must remove
    return launched, ports, [server, *stubs], shm_prefix(server)


@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGINT", "SIGHUP", "killpg SIGTERM"], ids=lambda how: how.replace(" ", "-")
)
def test_a_signal_to_the_launcher_stops_its_server_and_cleans_up(
    tiny: Path, tmp_path: Path, how: str
) -> None:
    launched, ports, processes, prefix = _started(tiny, tmp_path)
    signum = signal.Signals[how.split()[-1]]
    if how.startswith("killpg"):  # what a harness does to the launcher's process group
        os.killpg(launched.process.pid, signum)
    else:
        launched.process.send_signal(signum)
    assert_all_gone(processes, ports, prefix, tmp_path / "tmp", launched.process)
    assert launched.process.returncode == 0, launched.output()
    assert f"{signum.name}: stopping tritonserver" in launched.output()


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGKILL], ids=lambda s: s.name)
def test_a_server_that_dies_is_one_line_naming_the_signal_and_a_nonzero_exit(
    tiny: Path, tmp_path: Path, signum: signal.Signals
) -> None:
    """A crash (SIGSEGV) or the OOM killer (SIGKILL) ends tritonserver under `serve`: the launcher says so
    in one line, naming the signal, and exits as a shell reports it (128 + its number), so a supervisor
    (compose's restart policy, Kubernetes) starts it again."""
    launched, ports, processes, _ = _started(tiny, tmp_path)
    launched.server().send_signal(signum)
    launched.process.wait(timeout=STOP_BOUND_S)
    assert launched.process.returncode == 128 + signum, launched.output()
    assert f"tritonserver died: killed by {signum.name} (signal {int(signum)})" in launched.output()
    _, alive = psutil.wait_procs(processes, timeout=STOP_BOUND_S)
    assert alive == [], f"still running after the server died: {alive}"
    assert [p for p in ports if port_in_use(p)] == []


def test_a_sigkilled_launcher_takes_its_server_down(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PR_SET_PDEATHSIG: the kernel sends tritonserver SIGTERM when the launcher dies, and Triton then
    removes its own shared memory. The launcher's work folder stays (nobody is left to remove it) until
    the next launcher starts, which removes it."""
    launched, ports, processes, prefix = _started(tiny, tmp_path)
    launched.process.kill()
    launched.process.wait()
    _, alive = psutil.wait_procs(processes, timeout=STOP_BOUND_S)
    assert alive == [], f"the SIGKILLed launcher's server still runs: {alive}"
    assert [p for p in ports if port_in_use(p)] == []
    assert sorted(SHM_DIR.glob(f"{prefix}*")) == []
    orphaned = launcher_files(tmp_path / "tmp")
    assert [p.name.startswith(f"{WORKDIR_PREFIX}{launched.process.pid}_") for p in orphaned] == [True]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    with LocalTritonServer(tiny):
        assert not orphaned[0].exists()
    assert launcher_files(tmp_path / "tmp") == []


def test_a_second_launcher_on_the_same_ports_fails_fast_and_names_the_port(
    tiny: Path, tmp_path: Path
) -> None:
    ports = three_ports()
    with LocalTritonServer(tiny, *ports) as first:
        started = time.monotonic()
        second = launch(launcher_command(tiny, ports), tmp_path / "tmp")
        code = second.process.wait(timeout=60)
        elapsed = time.monotonic() - started
        output = second.output()
        assert first.is_ready()
    assert code != 0
    assert READY not in output
    assert f"port {ports[0]}" in output.splitlines()[0], output
    assert elapsed < 15, f"the port conflict took {elapsed:.1f} s to report"
    assert launcher_files(tmp_path / "tmp") == []


def test_a_port_taken_after_the_pre_check_is_read_from_the_log_not_from_the_other_server(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other server answers /v2/health/ready on these ports; ours must still fail, naming the port
    from its own log's "already in use" line."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ports = three_ports()
    with LocalTritonServer(tiny, *ports) as first:
        second = LocalTritonServer(tiny, *ports)
        monkeypatch.setattr(second, "_check_ports", lambda: None)  # as if the port was taken just after
        with pytest.raises(ServerStartError) as caught:
            second.start()
        assert first.is_ready()
    assert caught.value.port_conflict
    assert "already in use" in str(caught.value).splitlines()[0], caught.value
    assert any(f":{port}" in str(caught.value) for port in ports), caught.value
    assert caught.value.log_path is not None and caught.value.log_path.exists()
    assert launcher_files(tmp_path) == [caught.value.log_path]
    assert sorted(SHM_DIR.glob(f"{second.shm_prefix}*")) == []


def test_a_load_error_comes_first_and_the_log_is_kept(tmp_path: Path) -> None:
    """A config that disagrees with its ONNX file: the launcher's first lines are the model's own error,
    then the path of the kept log; no work folder or shared memory stays."""
    repository = build_mismatch_repository(tmp_path / "repository")
    launched = launch([*LAUNCHER, f"--model-repository={repository}", *_free_port_args()], tmp_path / "tmp")
    assert launched.process.wait(timeout=180) == 1
    lines = launched.output().splitlines()
    assert lines[0].startswith("model 'mismatch' version 1 failed to load:"), lines
    assert "axis 1 is 2000 in config.pbtxt but 2010 in the ONNX file" in "\n".join(lines[:3]), lines
    assert len(lines) <= 6, "the log must not be dumped:\n" + "\n".join(lines)
    kept = Path(lines[-1].rsplit("full log: ", 1)[1].rstrip(")"))
    assert kept.parent == tmp_path / "tmp" and "failed to load 'mismatch'" in kept.read_text()
    assert launcher_files(tmp_path / "tmp") == [kept]


def _free_port_args() -> list[str]:
    http, grpc, metrics = three_ports()
    return [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]


@pytest.mark.parametrize("missing", ["model.py", "model.onnx"])
def test_a_missing_file_fails_within_seconds_naming_its_path(tiny: Path, missing: str) -> None:
    (tiny / "tiny" / "1" / missing).unlink()
    started = time.monotonic()
    with pytest.raises(ServerStartError) as caught:
        LocalTritonServer(tiny).start()
    assert time.monotonic() - started < 5
    assert str(tiny / "tiny" / "1" / missing) in str(caught.value)


def test_make_run_names_the_missing_file_first(tiny: Path) -> None:
    """`make run` runs client.smoke --local: a broken repository fails in seconds, its cause first."""
    (tiny / "tiny" / "1" / "model.py").unlink()
    smoke = [sys.executable, "-m", "client.smoke", "--local", f"--model-repository={tiny}", "--model=tiny"]
    done = subprocess.run(smoke, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines()[:2] == [
        "model repository check failed:",
        f"model 'tiny': {tiny / 'tiny' / '1' / 'model.py'} is missing (backend \"python\" runs the "
        'model.py of the version folder; backend "onnxruntime_zerocopy" needs none)',
    ], done.stderr


def test_normal_stop_leaves_no_folder_and_no_shared_memory(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with LocalTritonServer(tiny) as server:
        assert server.process is not None
        processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children()]
        ports = (server.http_port, server.grpc_port, server.metrics_port)
        assert server.shm_prefix is not None  # one backend only: the server has a prefix of its own
        assert sorted(SHM_DIR.glob(f"{server.shm_prefix}*")) != []
    assert "Started HTTPService" in server.log()  # the log stays readable after the stop
    assert_all_gone(processes, ports, server.shm_prefix, tmp_path / "tmp")


def test_make_serve_takes_its_ports_from_the_command_line(tiny: Path, tmp_path: Path) -> None:
    """`make serve HTTP_PORT=... GRPC_PORT=... METRICS_PORT=...` for real (the `models` prerequisite
    skipped: it builds the demo), stopped the way a harness stops it: SIGTERM to make's process group."""
    ports = three_ports()
    make = [
        "make",
        "-o",
        "models",
        "serve",
        f"PYTHON={sys.executable}",
        f"MODEL_REPOSITORY={tiny}",
        f"HTTP_PORT={ports[0]}",
        f"GRPC_PORT={ports[1]}",
        f"METRICS_PORT={ports[2]}",
    ]
    launched = launch(make, tmp_path / "tmp")
    launched.wait_for_line(READY, 120)
    server = next(
        p for p in psutil.Process(launched.process.pid).children(recursive=True) if p.name() == "tritonserver"
    )
    listening = {c.laddr.port for c in server.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert set(ports) <= listening, (ports, listening)
    processes = [server, *server.children(recursive=True)]
    prefix = shm_prefix(server)
    os.killpg(launched.process.pid, signal.SIGTERM)
    assert_all_gone(processes, ports, prefix, tmp_path / "tmp", launched.process)


def test_a_server_without_http_is_ready_through_grpc(tiny: Path) -> None:
    """--allow-http=false: readiness is asked over gRPC (there is no HTTP to ask), and the server serves."""
    with LocalTritonServer(tiny, extra_args=["--allow-http=false"]) as server:
        assert server.is_ready()
        assert not port_in_use(server.http_port)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        x = np.array([[1.5, -2.0]], np.float32)
        request = grpcclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        result = client.infer("tiny", [request])
        np.testing.assert_array_equal(result.as_numpy("y"), x)
        client.close()


def test_with_exit_on_error_false_the_failures_come_first_and_the_models_that_load_are_served(
    tmp_path: Path,
) -> None:
    """A repository where one model fails to load: with tritonserver's --exit-on-error=false the launcher
    names that model's own error first, then reports ready, and the model that loaded answers."""
    repository = tiny_repository(build_mismatch_repository(tmp_path / "repository"))
    ports = three_ports()
    command = [*launcher_command(repository, ports), "--startup-timeout=240", "--", "--exit-on-error=false"]
    launched = launch(command, tmp_path / "tmp")
    try:
        ready = launched.wait_for_line(READY, 240)
        before = launched.output().splitlines()
        failed = [line for line in before if "failed to load" in line]
        assert failed and failed[0].startswith("model 'mismatch' version 1 failed to load:"), before
        assert before.index(failed[0]) < before.index(ready)
        assert any("1 model(s) failed to load" in line for line in before), before
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        assert client.is_model_ready("tiny") and not client.is_model_ready("mismatch")
        assert not client.is_server_ready()  # --strict-readiness: not every model is ready
        x = np.ones((1, 2), np.float32)
        item = grpcclient.InferInput("x", [1, 2], "FP32")
        item.set_data_from_numpy(x)
        answer = client.infer("tiny", [item]).as_numpy("y")
        np.testing.assert_array_equal(answer, x)
    finally:
        launched.process.send_signal(signal.SIGINT)
    assert launched.process.wait(timeout=STOP_BOUND_S) == 0, launched.output()
    assert launcher_files(tmp_path / "tmp") == []


def test_the_startup_limit_comes_from_the_environment_and_names_how_to_raise_it(
    tiny: Path, tmp_path: Path
) -> None:
    """A limit too short for any load: the failure says which flag and variable allow longer."""
    launched = launch(
        [*launcher_command(tiny, three_ports())],
        tmp_path / "tmp",
        env={"TRITON_ORT_STARTUP_TIMEOUT_S": "0.5"},
    )
    assert launched.process.wait(timeout=120) == 1
    output = launched.output()
    assert "not ready after 0 s" in output or "not ready after 1 s" in output, output
    assert "--startup-timeout SECONDS or TRITON_ORT_STARTUP_TIMEOUT_S" in output, output


def test_another_backend_is_linked_into_the_servers_backends_and_tritonserver_opens_it(
    tmp_path: Path,
) -> None:
    """backends={name: folder} (client.bench --native-backend): a folder without libtriton_<name>.so (or
    model.py) fails the start at once, naming it; with one, tritonserver opens that file for a model of
    that backend (here a file that is no library: the model's load fails naming it), and the stop leaves
    the folder as it was."""
    repository = tmp_path / "repository"
    (repository / "native" / "1").mkdir(parents=True)
    graphs.identity(repository / "native" / "1" / "model.onnx", TensorProto.FLOAT)
    (repository / "native" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    folder = tmp_path / "onnxruntime"
    folder.mkdir()
    started = time.monotonic()
    with pytest.raises(
        ServerStartError, match=f"{folder} holds neither libtriton_onnxruntime.so nor model.py"
    ):
        LocalTritonServer(repository, backends={"onnxruntime": folder}).start()
    assert time.monotonic() - started < 5
    library = folder / "libtriton_onnxruntime.so"
    library.write_bytes(b"not a shared library")
    with pytest.raises(ServerStartError) as caught:
        LocalTritonServer(
            repository, backends={"onnxruntime": folder}, log_file=tmp_path / "tritonserver.log"
        ).start()
    first = str(caught.value).splitlines()[0]
    assert first.startswith("model 'native' version 1 failed to load") and "libtriton_onnxruntime.so" in first
    assert library.read_bytes() == b"not a shared library"
