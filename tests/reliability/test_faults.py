"""Faults on the real tritonserver, each on a server of its own: a python-backend stub killed under load,
the model unloaded and loaded again under explicit model control (test-only; shipped configs have no model
control), and SIGTERM with requests in flight. Every test stops by itself within its bounds."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.reliability.support import DEMO_INPUT, DEMO_OUTPUT, demo_reference, measured
from tests.support.paths import SERVER_TOLERANCE
from tests.support.repository import build_demo_repository, keep_in_flight
from triton_ort.harness.processes import alive, descendants, rss_bytes, stub_processes, zombies
from triton_ort.harness.releases import server_release
from triton_ort.harness.repository import read_config, write_config
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import Answer, tritonclient_infer
from triton_ort.harness.waiting import wait_for

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
# What a request may hear while the server shuts down: refused by the scheduler, the model gone, then the
# connection refused or closed once the server has exited.
CLEAR_SHUTDOWN_ERRORS = ("Server is stopping", "has no available versions", "StatusCode.CANCELLED")
# A client that reaches the server while it closes its sockets sees one of these. The call fails loudly
# (the client knows it has no answer); what the test forbids is a wrong answer or a hang.
CONNECTION_GONE = (
    "Connection refused",
    "Connection reset by peer",
    "failed to connect",
    "connection closed",
    "Socket closed",
)


# What a request held by, or sent to, a dead stub is answered (INTERNAL), in 2.41 and 2.51 alike:
# python_backend src/stub_launcher.cc ReceiveMessageFromStub, "Stub process '<instance>' is not healthy.",
# or "Failed to obtain the health mutex." when the stub died holding it (r23.12 and r24.10).
DEAD_STUB = ("is not healthy", "Failed to obtain the health mutex")
CLIENT_TIMEOUT_S = 30  # each Load request's own deadline (gRPC: DEADLINE_EXCEEDED; HTTP: timed out)


@pytest.fixture
def demo_repository(tmp_path: Path) -> Path:
    return build_demo_repository(tmp_path / "repository")


@dataclass(frozen=True)
class Event:
    started: float
    finished: float
    outcome: str  # ok, wrong, error, no_answer
    detail: str = ""


@dataclass
class Load:
    """Client threads sending good demo requests in a loop (HTTP and gRPC in turn), checking each answer."""

    server: LocalTritonServer
    threads: int = 8
    stop_on_no_answer: bool = False
    events: list[Event] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(5)
        self.inputs = [rng.standard_normal((2, 2010)).astype(np.float32) for _ in range(8)]
        self.wants = [demo_reference(x) for x in self.inputs]

    def _send(self, index: int, k: int) -> Answer:
        protocol = "grpc" if index % 2 else "http"
        url = self.server.grpc_url if protocol == "grpc" else self.server.http_url
        x = self.inputs[k % len(self.inputs)]
        return tritonclient_infer(
            protocol, url, "demo", [(DEMO_INPUT, x)], [DEMO_OUTPUT], timeout_s=CLIENT_TIMEOUT_S
        )

    def _worker(self, index: int) -> None:
        k = index
        while not self._stop.is_set():
            started = time.monotonic()
            answer = self._send(index, k)
            finished = time.monotonic()
            if answer.ok:
                right = np.allclose(
                    answer.outputs[DEMO_OUTPUT], self.wants[k % len(self.wants)], **SERVER_TOLERANCE
                )
                self.events.append(Event(started, finished, "ok" if right else "wrong"))
            elif answer.status == "NO_ANSWER" or "failed to connect" in answer.message:
                self.events.append(Event(started, finished, "no_answer", answer.message[:160]))
                if self.stop_on_no_answer:
                    return
            else:
                self.events.append(
                    Event(started, finished, "error", f"{answer.status} {answer.message[:160]}")
                )
            k += self.threads

    def start(self) -> Load:
        self._workers = [
            threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()
        return self

    def stop(self, timeout_s: float) -> list[threading.Thread]:
        """Stop sending; returns the threads still alive after `timeout_s` (hung requests)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        return [w for w in self._workers if w.is_alive()]

    def outcomes(self, since: float = 0.0) -> Counter[str]:
        return Counter(e.outcome for e in self.events if e.started >= since)


def _ran_out_its_deadline(event: Event) -> bool:
    """The request ended at its client's own deadline, whichever way the protocol words that."""
    return event.finished - event.started >= CLIENT_TIMEOUT_S


def _answered_since(load: Load, moment: float) -> bool:
    return any(e.outcome == "ok" and e.started > moment for e in load.events)


def _refused_since(load: Load, moment: float) -> int:
    return sum(e.outcome == "error" and e.started > moment for e in load.events)


@pytest.mark.parametrize("lanes", [0, 2])
def test_killed_stub_fails_clearly_and_is_restarted_where_the_release_does(
    demo_repository: Path, lanes: int
) -> None:
    """SIGKILL the demo's stub while 8 clients send. Every release answers the requests the dead stub held
    with "Stub process is not healthy" (INTERNAL); no answer is wrong and no client hangs. Then it depends
    on the release (releases.py, restarts_killed_stub): 2.41 starts a new stub and answers again (seen here:
    in about 2-3 s; in about a third of runs tritonserver itself dies, SIGSEGV in libtriton_python.so,
    right after the restart: docs/reliability.md); 2.51 restarts nothing and keeps refusing, server live.
    With `lanes`, one instance keeps requests in flight (docs/inflight.md) where the release has the
    response sender: the requests queued in the dead stub are answered the same way, none lost."""
    if lanes:
        keep_in_flight(demo_repository / "demo", lanes)
    with LocalTritonServer(demo_repository) as server:
        assert server.process is not None
        release = server_release(server.http_url)
        if lanes and not release.answers_through_response_sender:
            pytest.skip("this release serves the in-flight config in the classic execute: the case lanes=0")
        server_pid = server.process.pid
        stubs = stub_processes(server_pid)
        assert len(stubs) == 1, stubs
        killed = next(iter(stubs))
        load = Load(server).start()
        wait_for(lambda: load.outcomes()["ok"] >= 50, 60)
        killed_at = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        try:
            process = server.process
            try:
                wait_for(
                    lambda: process.poll() is not None
                    or _answered_since(load, killed_at)
                    or (not release.restarts_killed_stub and _refused_since(load, killed_at) >= 50),
                    90,
                )
            except AssertionError:
                since = Counter((e.outcome, e.detail[:90]) for e in load.events if e.finished > killed_at)
                seen = f"since the kill: {dict(since)}; stubs now: {stub_processes(server_pid)}"
                if release.restarts_killed_stub and process.poll() is None:
                    # The 2.41 restart defect's fourth face (twice in full CI-size runs on the 2-core machine,
                    # never in 16 runs of this test alone): the server lives and neither answers nor dies.
                    # Consistent with a message-queue mutex the killed stub held: python_backend r23.12
                    # locks it without a timeout (src/message_queue.h), where a timed lock gives the
                    # SIGABRT face above. The reason carries what was seen, for the record.
                    load.stop(timeout_s=60)
                    pytest.xfail(
                        "tritonserver 2.41 neither answered nor died within 90 s of a stub killed under load "
                        f"(upstream); {seen}"
                    )
                raise AssertionError(
                    f"within 90 s of the kill the server neither answered again nor died; {seen}; "
                    f"log ends:\n{server.log()[-3000:]}"
                ) from None
            time.sleep(3)  # keep the load on: answers after recovery must stay right (and no late crash)
            crashed = server.process.poll()
            log = server.log()
            segfault = crashed == -signal.SIGSEGV or "Signal (11) received" in log
            # The same defect, other face: the parent aborts on a shared-memory mutex the killed stub held
            # (seen once in 5 runs here since the model sends custom metrics: one more IPC per second).
            lock_abort = crashed == -signal.SIGABRT and "boost::interprocess::lock_exception" in log
            if crashed is not None and (segfault or lock_abort) and release.restarts_killed_stub:
                # Upstream defect of tritonserver 2.41's python backend, about 1 run in 3 here; nothing in
                # this repository can prevent it, and compose restarts the server (docs/reliability.md).
                # Any other death still fails this test, as does a hang on a release that restarts nothing.
                load.stop(timeout_s=60)
                pytest.xfail(
                    "tritonserver 2.41 died restarting a stub killed under load (upstream: "
                    f"{'SIGSEGV' if segfault else 'SIGABRT, boost::interprocess::lock_exception'})"
                )
            assert crashed is None, (
                f"tritonserver itself died (exit {crashed}) after the stub was killed under load; "
                f"its log ends:\n{server.log()[-2500:]}"
            )
            live = httpclient.InferenceServerClient(server.http_url).is_server_live()
        finally:
            hung = load.stop(timeout_s=60)
        stubs_after = stub_processes(server_pid)
        if release.restarts_killed_stub:
            stubs_after = wait_for(lambda: stub_processes(server_pid), 30)
        unreaped = zombies(server_pid)
        log = server.log()
    if lanes and release.answers_through_response_sender:
        assert f"keeping requests in flight on {lanes} lanes" in log, log[-2000:]
    failures = [e for e in load.events if e.outcome != "ok" and e.finished > killed_at]
    assert hung == [], f"{len(hung)} client threads never got an answer"
    assert load.outcomes()["wrong"] == 0
    assert failures, "no request failed after the kill: the stub was not killed under load"
    unclear = [e for e in failures if not (e.outcome == "error" and any(t in e.detail for t in DEAD_STUB))]
    if release.restarts_killed_stub and unclear and all(_ran_out_its_deadline(e) for e in unclear):
        # The same 2.41 defect, a third face (twice in full CI-size runs on the 2-core machine, 2026-12-05):
        # requests that reached the server while it restarted the stub got no answer until their client's
        # own deadline, over gRPC and HTTP alike. The clients are not stuck (the deadline ends them); the
        # server answered nothing wrong.
        pytest.xfail(f"tritonserver 2.41 held {len(unclear)} request(s) past the client's deadline while it "
                     "restarted a stub killed under load (upstream)")  # fmt: skip
    assert unclear == [], unclear[:5]
    assert live, "tritonserver stopped answering its health endpoint after the stub died"
    assert killed not in stubs_after
    if not release.restarts_killed_stub:
        measured(
            f"stub SIGKILLed under load (8 clients), Triton {release.version}: no restart (as upstream); "
            f"{len(failures)} request(s) refused with 'Stub process is not healthy', none wrong or hung"
        )
        assert not _answered_since(load, killed_at + 1), "answered after the kill without a restart"
        assert stubs_after == {}, stubs_after
        return  # the dead stub stays unreaped until the model unloads (nothing restarts it to reap it)
    assert unreaped == [], f"unreaped processes under tritonserver: {unreaped}"
    assert _answered_since(load, killed_at), (
        f"no answer within 90 s of the kill; since then: "
        f"{dict(Counter((e.outcome, e.detail[:90]) for e in load.events if e.finished > killed_at))}"
    )
    recovered_at = min(e.finished for e in load.events if e.outcome == "ok" and e.started > killed_at)
    recovery_s = recovered_at - killed_at
    after_recovery = load.outcomes(since=recovered_at)
    measured(
        f"stub SIGKILLed under load (8 clients): recovered in {recovery_s:.2f} s; "
        f"{len(failures)} request(s) failed meanwhile ({Counter(e.detail[:90] for e in failures)}); "
        f"after recovery {dict(after_recovery)}"
    )
    assert set(after_recovery) == {"ok"} and after_recovery["ok"] >= 10, after_recovery
    assert len(stubs_after) == 1, stubs_after
    assert "Stub process is unhealthy and it will be restarted" in log
    assert recovery_s < 60


def test_unload_and_load_under_explicit_model_control_leak_no_process(demo_repository: Path) -> None:
    """Explicit model control here only (shipped configs have none): unload and load the demo a few
    times; its stub must go with each unload and come back once with each load, answers stay right, and
    tritonserver's own memory stays within a bound."""
    x = np.random.default_rng(3).standard_normal((3, 2010)).astype(np.float32)
    want = demo_reference(x)
    explicit = ["--model-control-mode=explicit", "--load-model=demo"]
    with LocalTritonServer(demo_repository, extra_args=explicit) as server:
        assert server.process is not None
        server_pid = server.process.pid
        client = httpclient.InferenceServerClient(server.http_url)
        release = server_release(server.http_url)
        processes_before = len(descendants(server_pid))
        assert len(stub_processes(server_pid)) == 1
        server_rss = []
        for _ in range(3):
            old_stubs = list(stub_processes(server_pid))
            client.unload_model("demo")
            wait_for(lambda: not client.is_model_ready("demo"), 60)
            wait_for(lambda: not any(alive(pid) for pid in old_stubs), 60)  # noqa: B023 (called at once)
            assert stub_processes(server_pid) == {}
            refused = tritonclient_infer("http", server.http_url, "demo", [(DEMO_INPUT, x)])
            assert refused.status == release.status("http", "NOT_FOUND") and "demo" in refused.message, (
                refused
            )
            client.load_model("demo")
            assert client.is_model_ready("demo")
            assert len(stub_processes(server_pid)) == 1
            answer = tritonclient_infer("grpc", server.grpc_url, "demo", [(DEMO_INPUT, x)], [DEMO_OUTPUT])
            assert answer.ok, answer
            np.testing.assert_allclose(answer.outputs[DEMO_OUTPUT], want, **SERVER_TOLERANCE)
            server_rss.append(rss_bytes(server_pid))
        processes_after = len(descendants(server_pid))
        unreaped = zombies(server_pid)
    growth = server_rss[-1] - server_rss[0]
    measured(
        f"3 unload/load cycles: processes under tritonserver {processes_before} -> {processes_after}; "
        f"tritonserver RSS after each load {[round(r / MiB, 1) for r in server_rss]} MiB"
    )
    assert processes_after == processes_before
    assert unreaped == []
    assert growth < 32 * MiB, f"tritonserver grew {growth / MiB:.1f} MiB over two reloads"


def test_sigterm_with_requests_in_flight_finishes_them_and_hangs_nothing(demo_repository: Path) -> None:
    """16 clients keep sending while the server gets SIGTERM; a long queue delay keeps requests in flight.
    Triton drains the requests it has accepted (answered, right), refuses the rest with a clear error, and
    exits within its --exit-timeout-secs; no client waits forever."""
    config = read_config(demo_repository / "demo")
    config.dynamic_batching.max_queue_delay_microseconds = 300_000
    write_config(demo_repository / "demo", config)
    server = LocalTritonServer(demo_repository).start()
    assert server.process is not None
    stubs = stub_processes(server.process.pid)
    load = Load(server, threads=16, stop_on_no_answer=True).start()
    try:
        wait_for(lambda: load.outcomes()["ok"] >= 32, 60)
        sigterm_at = time.monotonic()
        exit_code = server.stop(timeout_s=60)
        stop_s = time.monotonic() - sigterm_at
    finally:
        server.stop()
        hung = load.stop(timeout_s=60)
    around = [e for e in load.events if e.finished >= sigterm_at]
    answered_after = [e for e in around if e.outcome == "ok"]
    unclear = [
        e
        for e in around
        if e.outcome == "wrong"
        or (e.outcome == "error" and not any(text in e.detail for text in CLEAR_SHUTDOWN_ERRORS))
        or (e.outcome == "no_answer" and not any(text in e.detail for text in CONNECTION_GONE))
    ]
    measured(
        f"SIGTERM under load (16 clients, 300 ms queue delay): {len(answered_after)} requests answered "
        f"(right) after the signal; server exited {exit_code} after {stop_s:.1f} s; every answer "
        f"after the signal: {dict(Counter((e.outcome, e.detail[:60]) for e in around))}"
    )
    assert hung == [], f"{len(hung)} client threads hung"
    assert exit_code == 0
    assert stop_s < 15  # --exit-timeout-secs=10, plus the unload
    assert load.outcomes()["wrong"] == 0
    assert answered_after, "nothing in flight was answered after the signal: Triton did not drain"
    assert unclear == [], unclear[:5]
    assert not any(alive(pid) for pid in stubs), "a stub outlived tritonserver"
