"""The server container on the default path, as `make up` / `make smoke-docker` run it (CPU override).

The tests share one running container and run in file order; the last one stops it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tests.container.conftest import HTTP_URL, PORTS, Compose, docker, inspect
from tests.support.user_commands import ready
from triton_ort.harness.waiting import wait_for

MODEL = "demo"
START_PERIOD_S = 180  # docker/compose.yaml's healthcheck start_period
STOP_GRACE_S = 45  # docker/compose.yaml's stop_grace_period

# Run inside the container: every process's uid, NoNewPrivs, effective capabilities, and for the stubs
# which libonnxruntime* files are mapped (from /proc: the image has no ps).
PROCESSES = r"""
import json, os
out = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
        status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
        maps = sorted({l.split()[-1] for l in open(f"/proc/{pid}/maps") if "libonnxruntime" in l})
        env = dict(e.split("=", 1) for e in open(f"/proc/{pid}/environ").read().split("\0") if "=" in e)
    except OSError:
        continue
    out.append({"pid": int(pid), "cmd": cmd, "uid": status["Uid"].split()[0],
                "nonewprivs": status.get("NoNewPrivs", "").strip(), "capeff": status["CapEff"].strip(),
                "onnxruntime": maps, "ppid": int(status["PPid"]), "argv": cmd.split(),
                "library_path": env.get("LD_LIBRARY_PATH", "")})
print(json.dumps(out))
"""


# ORT asked for the CUDA EP loads libonnxruntime_providers_shared.so by bare name (even the CPU build).
PROVIDER_PROBE = r"""
import onnxruntime
try:
    onnxruntime.InferenceSession("/models/demo/1/model.onnx", providers=["CUDAExecutionProvider"])
except Exception:
    pass
print(*sorted({l.split()[-1] for l in open("/proc/self/maps") if "libonnxruntime" in l}))
"""


def processes(container: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(docker("exec", container, "python3", "-c", PROCESSES).stdout)
    return result


def stubs(container: str) -> list[dict[str, Any]]:
    return [p for p in processes(container) if "triton_python_backend_stub" in p["cmd"]]


def request(client: Any, rows: int = 4) -> tuple[NDArray[np.float32], NDArray[Any]]:
    batch = np.random.default_rng(rows).standard_normal((rows, 2010), dtype=np.float32)
    item = httpclient.InferInput("np_script_embeddings", list(batch.shape), "FP32")
    item.set_data_from_numpy(batch)
    result = client.infer(MODEL, [item], outputs=[httpclient.InferRequestedOutput("np_logits")])
    return batch, result.as_numpy("np_logits")


@pytest.fixture(scope="module")
def reference(served: Compose, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """ONNX Runtime on the host, on the very file the container serves."""
    import onnxruntime

    onnx = tmp_path_factory.mktemp("model") / "model.onnx"
    docker("cp", f"{served.container()}:/models/demo/1/model.onnx", str(onnx))
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    return lambda batch: session.run(["np_logits"], {"np_script_embeddings": batch})[0]


def test_healthy_within_start_period(served: Compose) -> None:
    container = served.container()
    assert inspect(container, "{{.State.Health.Status}}") == "healthy"
    started = inspect(container, "{{.State.StartedAt}}")
    log = json.loads(inspect(container, "{{json .State.Health.Log}}"))
    first_ok = next(entry["Start"] for entry in log if entry["ExitCode"] == 0)
    took = _seconds(first_ok) - _seconds(started)
    print(f"healthy {took:.1f} s after the start (start period {START_PERIOD_S} s)")
    assert took < START_PERIOD_S


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00").timestamp()


def test_client_service_smoke(served: Compose) -> None:
    result = served("run", "--rm", "--no-deps", "client", check=False)
    print(result.stdout[-2000:])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "http" in result.stdout and "grpc" in result.stdout


def test_runs_as_uid_1000(served: Compose) -> None:
    container = served.container()
    assert docker("exec", container, "id", "-u").stdout.strip() == "1000"
    server = [p for p in processes(container) if p["cmd"].startswith("tritonserver")]
    assert server and {p["uid"] for p in processes(container)} == {"1000"}


def test_entrypoint_gave_tritonserver_its_command_line_and_library_path(served: Compose) -> None:
    """What the entrypoint and compose really started, read from the running processes."""
    container = served.container()
    procs = {p["pid"]: p for p in processes(container)}
    # compose's init: true: PID 1 is Docker's init, and the entrypoint exec'd tritonserver under it.
    assert "docker-init" in procs[1]["cmd"], procs[1]
    server = next(p for p in procs.values() if p["argv"][0].endswith("tritonserver"))
    assert server["ppid"] == 1, server
    for flag in ("--model-control-mode=none", "--exit-timeout-secs=30", "--strict-readiness=true"):
        assert flag in server["argv"], (flag, server["argv"])
    for flag in ("--http-restricted-api=logging,trace:", "--grpc-restricted-protocol=logging,trace:"):
        assert any(a.startswith(flag) for a in server["argv"]), (flag, server["argv"])
    # Triton's ORT folder, first on the image's LD_LIBRARY_PATH, is gone from tritonserver's and the stubs'.
    for proc in [server, *stubs(container)]:
        assert "/opt/tritonserver/backends/onnxruntime" not in proc["library_path"].split(":"), proc
    # shm_size: the python backend's /dev/shm is 1 GiB, not Docker's 64 MB.
    df = docker("exec", container, "df", "--output=size", "-B1", "/dev/shm").stdout.split()
    assert int(df[-1]) >= 1 << 30, df


def test_no_model_control_or_log_files_over_the_network(served: Compose) -> None:
    client = httpclient.InferenceServerClient(HTTP_URL)
    with pytest.raises(InferenceServerException):
        client.unload_model(MODEL)
    assert client.is_model_ready(MODEL)
    # The logging API answers only requests carrying the per-start admin header.
    import urllib.error
    import urllib.request

    update = urllib.request.Request(
        f"http://{HTTP_URL}/v2/logging", data=b'{"log_file": "/tmp/x"}', method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(update, timeout=10)
    assert refused.value.code in (401, 403), refused.value.code


def test_stub_loads_no_onnxruntime_from_tritons_folder(served: Compose) -> None:
    container = served.container()
    found = stubs(container)
    assert found, "no python-backend stub running"
    for stub in found:
        foreign = [f for f in stub["onnxruntime"] if f.startswith("/opt/tritonserver/backends/onnxruntime")]
        assert not foreign, f"stub {stub['pid']} maps {foreign}"
    # The folder is there and first on the image's path, as in 23.12. Even with that path (a plain
    # `docker exec`, not the entrypoint's), the CPU build (1.32.0) loads its providers library by full path
    # (seen here), so on the CPU stack this cannot fail; the GPU stack's bare-name load is what
    # tests/docker/test_library_path.py reproduces and image_selfcheck.py checks at build time.
    assert "/opt/tritonserver/backends/onnxruntime:" in inspect(container, "{{json .Config.Env}}")
    listing = docker("exec", container, "ls", "/opt/tritonserver/backends/onnxruntime").stdout
    assert "libonnxruntime_providers_shared.so" in listing
    mapped = docker("exec", container, "python3", "-c", PROVIDER_PROBE).stdout.split()
    print(f"CPU onnxruntime under the image's own LD_LIBRARY_PATH maps {mapped}")


def test_hardened_like_the_kubernetes_manifests(served: Compose, reference: Any) -> None:
    container = served.container()
    assert inspect(container, "{{.HostConfig.ReadonlyRootfs}}") == "true"
    assert inspect(container, "{{json .HostConfig.CapDrop}}") == '["ALL"]'
    assert "no-new-privileges:true" in inspect(container, "{{json .HostConfig.SecurityOpt}}")
    for proc in processes(container):
        assert proc["capeff"] == "0000000000000000", proc
        assert proc["nonewprivs"] == "1", proc
    # Writable only where Triton and the stub write.
    for path in ("/opt/triton-ort/x", "/models/x", "/x"):
        assert docker("exec", container, "touch", path, check=False).returncode != 0, path
    for path in ("/tmp/x", "/home/triton-server/x", "/dev/shm/x"):
        docker("exec", container, "sh", "-c", f"touch {path} && rm {path}")
    # And it still serves right under all of that.
    batch, got = request(httpclient.InferenceServerClient(HTTP_URL))
    np.testing.assert_allclose(got, reference(batch), rtol=1e-4, atol=1e-5)


def test_killed_stub_comes_back(served: Compose, reference: Any) -> None:
    """A stub of the demo killed with SIGKILL: the python backend starts a new one when its instance next
    gets a request, or tritonserver dies and the restart policy (unless-stopped) brings the container back.
    Either way every instance serves right again, and no answer in between is wrong. Requests go four at
    a time, so that both of the demo's instances get work (one at a time, the scheduler can keep giving
    them to the live one, and the dead instance is never restarted)."""
    container = served.container()
    restarts_before = int(inspect(container, "{{.RestartCount}}"))
    before = [s["pid"] for s in stubs(container)]
    # The image also serves demo_hooks, whose stub no demo request would ever bring back.
    victim = next(s["pid"] for s in stubs(container) if f"/{MODEL}/1/" in s["cmd"])
    # The image has no procps: Python sends the signal (as uid 1000, the stub's own user).
    docker("exec", container, "python3", "-c", f"import os; os.kill({victim}, 9)")
    deadline = time.monotonic() + 240
    answers: list[str] = []

    def one(rows: int) -> str:
        try:
            # A fresh connection each time: a container restart drops the old one.
            batch, got = request(httpclient.InferenceServerClient(HTTP_URL), rows)
        except Exception as error:  # refused, reset, or the model's error while the stub is down
            return f"{type(error).__name__}: {str(error)[:100]}"
        np.testing.assert_allclose(got, reference(batch), rtol=1e-4, atol=1e-5)
        return "ok"

    with ThreadPoolExecutor(4) as pool:
        while True:
            round_answers = list(pool.map(one, (1, 2, 3, 4)))
            answers += round_answers
            if round_answers != ["ok"] * 4:
                time.sleep(0.5)
            now, down = _stub_pids_while_restarting(container)
            # Every instance has a live stub again, the victim is not among them, and the last 12 were right.
            if len(now) == len(before) and victim not in now and answers[-12:] == ["ok"] * 12:
                break
            assert time.monotonic() < deadline, (
                f"not recovered in 240 s: stubs {before} -> {now} {down}, last {answers[-3:]}"
            )
    restarts = int(inspect(container, "{{.RestartCount}}")) - restarts_before
    refused = [a for a in answers if a != "ok"]
    print(
        f"after the kill: {len(answers)} requests, {len(refused)} refused, container restarts {restarts}, "
        f"stubs {before} -> {now}; refusals: {sorted(set(refused))[:3]}"
    )


def _stub_pids_while_restarting(container: str) -> tuple[list[int], str]:
    """The stubs' pids, or none and why while the container is down: the restart policy can take it down
    and up again between any two docker calls, so a failed look is a "not yet", never an error."""
    try:
        return [s["pid"] for s in stubs(container)], ""
    except subprocess.CalledProcessError as error:
        return [], f"(container not answering: {error.stderr.strip()[:120]})"


def test_the_watchdog_restarts_a_server_that_stopped_answering(served: Compose, reference: Any) -> None:
    """tritonserver stopped (SIGSTOP) stands for a server that no longer answers: compose restarts no
    container for being unhealthy, so the entrypoint's watchdog kills tritonserver after three failed
    probes in a row and `restart: unless-stopped` brings the container back, answering right again."""
    wait_for(lambda: ready(int(PORTS["HTTP_PORT"])), START_PERIOD_S, "the server ready", interval_s=0.5)
    container = served.container()
    restarts_before = int(inspect(container, "{{.RestartCount}}"))
    procs = processes(container)
    watchdog = [p for p in procs if "triton_ort.probe" in p["cmd"] and "--watch" in p["argv"]]
    server = next(p for p in procs if p["argv"][0].endswith("tritonserver"))
    assert [p["argv"][p["argv"].index("--watch") + 1] for p in watchdog] == [str(server["pid"])], watchdog
    # The watchdog counts only once a probe passed (a load is no failure), and a test before this one may
    # have restarted the container a moment ago: stop the server only once this start's watchdog counts.
    started = inspect(container, "{{.State.StartedAt}}")

    def this_start_log() -> str:
        said = docker("logs", "--since", started, container, check=False)
        return said.stdout + said.stderr

    wait_for(
        lambda: f"probe: watching tritonserver (pid {server['pid']})" in this_start_log(),
        30,
        "the watchdog counting",
        interval_s=0.5,
    )
    docker("exec", container, "python3", "-c", f"import os, signal; os.kill({server['pid']}, signal.SIGSTOP)")
    # 3 probes of up to 10 s, 10 s apart, then 10 s of SIGTERM before SIGKILL; then the start (cold load)
    try:
        wait_for(
            lambda: int(inspect(container, "{{.RestartCount}}")) > restarts_before,
            120,
            "the watchdog to end the stopped server and compose to restart the container",
            interval_s=1,
        )
    except AssertionError as error:
        log = served.logs()[-3000:]
        # Not left stopped for the tests after this one: killed, the container is restarted.
        docker("exec", container, "python3", "-c", f"import os; os.kill({server['pid']}, 9)", check=False)
        raise AssertionError(f"{error}\nthe container's log, its end:\n{log}") from None
    assert "did not answer 3 probes in a row" in served.logs()
    wait_for(
        lambda: ready(int(PORTS["HTTP_PORT"])), START_PERIOD_S, "the restarted server ready", interval_s=0.5
    )
    batch, got = request(httpclient.InferenceServerClient(HTTP_URL))
    np.testing.assert_allclose(got, reference(batch), rtol=1e-4, atol=1e-5)


def test_stop_with_requests_in_flight(served: Compose, reference: Any) -> None:
    """`docker compose stop` under load: every request is answered right or refused cleanly, and the
    server exits inside stop_grace_period (tritonserver's own exit, not Docker's SIGKILL)."""
    # Ready first: a test before this one may have left the container restarting (a killed stub can take
    # tritonserver down with it), and this test is about a stop, not a start.
    wait_for(lambda: ready(int(PORTS["HTTP_PORT"])), START_PERIOD_S, "the server ready", interval_s=0.5)
    container = served.container()
    outcomes: list[str] = []
    wrong: list[str] = []
    stop = threading.Event()

    def load() -> None:
        client = httpclient.InferenceServerClient(HTTP_URL, network_timeout=60)
        while not stop.is_set():
            try:
                batch, got = request(client, rows=64)
            except Exception as error:  # refused or unavailable: a clean no
                outcomes.append(type(error).__name__)
                time.sleep(0.05)
                continue
            if np.allclose(got, reference(batch), rtol=1e-4, atol=1e-5):
                outcomes.append("ok")
            else:
                wrong.append("wrong answer")

    workers = [threading.Thread(target=load) for _ in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(3)
    started = time.monotonic()
    served("stop", "triton", timeout=STOP_GRACE_S + 30)
    took = time.monotonic() - started
    stop.set()
    for worker in workers:
        worker.join(timeout=90)
    answered = outcomes.count("ok")
    refused = sorted({o for o in outcomes if o != "ok"})
    print(f"stop took {took:.1f} s; {answered} answered right, refused as {refused}, {len(wrong)} wrong")
    assert not wrong
    assert answered > 0
    assert took < STOP_GRACE_S
    # Exit code 137 would be Docker's SIGKILL at the end of the grace period.
    assert inspect(container, "{{.State.ExitCode}}") != "137"
    assert inspect(container, "{{.State.Running}}") == "false"
    # No stub left behind (the container's /dev/shm, its own tmpfs, goes with it).
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    own = [line for line in ps.splitlines() if "/opt/tritonserver/backends/python/triton_python" in line]
    assert not own, own
