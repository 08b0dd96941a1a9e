"""A model update that goes wrong once, on the real tritonserver: a half-copied model.onnx loaded under
explicit model control or seen by the repository poll, traffic on the serving version meanwhile, then the
good file back. The serving version answers throughout; the good file loads again and every later load takes
its usual time; no stub of a replaced or failed version stays alive (read from the process table); the
serving version's custom metrics stay on the metrics port. Each test has a server of its own and client
deadlines, so a stalled load fails the test instead of hanging it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.reliability.support import DEMO_INPUT, DEMO_OUTPUT, assert_demo_answer, measured
from tests.support.metrics_port import scrape, series
from tests.support.repository import build_demo_repository, with_custom_metrics
from triton_ort.harness.processes import stub_processes
from triton_ort.harness.repository import copy_model
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import tritonclient_infer
from triton_ort.harness.waiting import wait_for
from triton_ort.runtime.metrics import FLUSH_INTERVAL_S

pytestmark = pytest.mark.integration

# What a half-copied deploy leaves: not an ONNX file (the load says "not a readable ONNX file").
HALF_COPIED = b"\x08\x07half-copied" * 64
# A load after the failure may take this many times the same server's first load of that model (a busy
# 2-core machine included), and never less than MIN_LOAD_BOUND_S; past it the load counts as stalled.
LOAD_SLOWDOWN = 4
MIN_LOAD_BOUND_S = 30.0
X = np.random.default_rng(52).standard_normal((3, 2010)).astype(np.float32)


def _stubs(server: LocalTritonServer) -> dict[int, str]:
    assert server.process is not None
    return stub_processes(server.process.pid)


def _stubs_of(server: LocalTritonServer, model: str) -> set[int]:
    # A stub read while it starts may not show its model.py yet ("?"): it belongs to no model until it does.
    return {pid for pid, model_py in _stubs(server).items() if Path(model_py).parts[-3:-2] == (model,)}


def _one_stub(server: LocalTritonServer, model: str) -> int:
    """The model's one stub, once any other (the auto-complete stub of its load, a replaced version's) has
    gone."""

    def only_stub() -> set[int]:
        stubs = _stubs_of(server, model)
        return stubs if len(stubs) == 1 else set()

    (stub,) = wait_for(only_stub, 60, f"one {model} stub")
    return stub


def _answer(server: LocalTritonServer, model: str = "demo") -> None:
    assert_demo_answer(
        tritonclient_infer("http", server.http_url, model, [(DEMO_INPUT, X)], [DEMO_OUTPUT]), X
    )


def _requests_counted(server: LocalTritonServer, stub: int) -> float | None:
    """What the demo's series of stub `stub` counts on the metrics port (None: no such series)."""
    found = series(scrape(server), "triton_ort_requests_total", model="demo", pid=str(stub))
    return sum(found.values()) if found else None


def _deploy(path: Path, data: bytes, scratch: Path) -> None:
    """Writes the file whole at once, as a deploy should under the poll (write beside, then rename): a
    file written in place can be seen by the poll between its truncation and its last write, and the poll
    then loads the same file a second time for its later modification time, which replaces the stub."""
    staged = scratch / f"staged-{path.name}"
    staged.write_bytes(data)
    os.replace(staged, path)


def _wait_counted(server: LocalTritonServer, stub: int, requests: int) -> None:
    wait_for(
        lambda: _requests_counted(server, stub) == requests,
        50 * FLUSH_INTERVAL_S,
        f"the serving stub's triton_ort_requests_total == {requests}",
    )


def _timed_load(client: httpclient.InferenceServerClient, model: str) -> float:
    started = time.monotonic()
    client.load_model(model)
    return time.monotonic() - started


def _add_other_model(repository: Path) -> None:
    """A second model of the same backend (the demo under another name): the "next load" of the tests.
    Made beside the repository and moved in whole, so that a repository poll never sees half of it."""
    staged = copy_model(repository / "demo", repository.parent / "staging", "other")
    staged.rename(repository / "other")


@pytest.mark.parametrize("request_between", [True, False], ids=["request_between", "no_request_between"])
def test_a_failed_reload_stalls_no_later_load(tmp_path: Path, request_between: bool) -> None:
    """load; a garbage model.onnx loaded (fails, the old version serves); [a request]; the good file loaded
    again; then another model: each load within its usual time, and one stub per loaded instance."""
    repository = build_demo_repository(tmp_path / "repository")
    with_custom_metrics(repository / "demo")  # the stubs' series are read
    _add_other_model(repository)
    onnx = repository / "demo" / "1" / "model.onnx"
    good = onnx.read_bytes()
    explicit = ["--model-control-mode=explicit", "--load-model=demo"]
    with LocalTritonServer(repository, extra_args=explicit) as server:
        # The usual load time of this server, measured on `other` before anything went wrong.
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
        usual_s = _timed_load(client, "other")
        client.unload_model("other")
        wait_for(lambda: not _stubs_of(server, "other"), 60, "the unloaded model's stub gone")
        bound_s = max(MIN_LOAD_BOUND_S, LOAD_SLOWDOWN * usual_s)
        # A deadline on every call from here on: a stalled load fails the test.
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=bound_s)

        serving = _one_stub(server, "demo")
        _answer(server)
        _wait_counted(server, serving, 1)

        onnx.write_bytes(HALF_COPIED)  # the half-copied deploy
        with pytest.raises(InferenceServerException, match="not a readable ONNX file"):
            client.load_model("demo")
        assert client.is_model_ready("demo"), "the serving version went with the failed load"
        wait_for(lambda: _stubs_of(server, "demo") == {serving}, 60, "the failed load's stub gone")
        if request_between:
            _answer(server)
        # The failed load's metrics went with its stub; the serving stub's series stays, and counts.
        _wait_counted(server, serving, 2 if request_between else 1)

        onnx.write_bytes(good)
        reload_s = _timed_load(client, "demo")
        wait_for(lambda: serving not in _stubs_of(server, "demo"), 60, "the replaced version's stub gone")
        reloaded = _one_stub(server, "demo")
        _answer(server)
        next_s = _timed_load(client, "other")
        _answer(server, "other")
        assert _stubs_of(server, "demo") == {reloaded}
        assert len(_stubs_of(server, "other")) == 1
        assert len(_stubs(server)) == 2, _stubs(server)
        _wait_counted(server, reloaded, 1)
        assert _requests_counted(server, serving) is None, "the replaced stub's series outlived it"
    measured(
        f"failed reload {'with' if request_between else 'without'} a request between: usual load "
        f"{usual_s:.1f} s, reload after it {reload_s:.1f} s, next model {next_s:.1f} s "
        f"(bound {bound_s:.0f} s)"
    )
    assert reload_s < bound_s and next_s < bound_s


def test_a_half_written_file_seen_by_the_poll_stalls_no_later_load(tmp_path: Path) -> None:
    """The same under --model-control-mode=poll: the poll finds a garbage model.onnx (the load fails, the
    old version serves), a request, the good file back (reloaded), then a new model folder (loaded)."""
    repository = build_demo_repository(tmp_path / "repository")
    with_custom_metrics(repository / "demo")  # the stubs' series are read
    onnx = repository / "demo" / "1" / "model.onnx"
    good = onnx.read_bytes()
    poll = ["--model-control-mode=poll", "--repository-poll-secs=1"]
    with LocalTritonServer(repository, extra_args=poll) as server:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60.0)
        serving = _one_stub(server, "demo")
        _answer(server)
        _wait_counted(server, serving, 1)

        _deploy(onnx, HALF_COPIED, tmp_path)
        wait_for(lambda: "not a readable ONNX file" in server.log(), 60, "the poll's failed load")
        wait_for(lambda: _stubs_of(server, "demo") == {serving}, 60, "the failed load's stub gone")
        assert client.is_model_ready("demo")
        _answer(server)
        _wait_counted(server, serving, 2)

        _deploy(onnx, good, tmp_path)
        wait_for(lambda: serving not in _stubs_of(server, "demo"), 60, "the poll's reload")
        reloaded = _one_stub(server, "demo")
        _answer(server)

        started = time.monotonic()
        _add_other_model(repository)
        wait_for(lambda: _stubs_of(server, "other") and client.is_model_ready("other"), 60, "the new model")
        next_s = time.monotonic() - started
        _answer(server, "other")
        assert _stubs_of(server, "demo") == {reloaded}
        assert len(_stubs(server)) == 2, _stubs(server)
    measured(
        f"poll: a half-written file, then the good one; a new model loaded {next_s:.1f} s after it appeared"
    )
