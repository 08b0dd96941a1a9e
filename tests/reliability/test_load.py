"""Load on the real tritonserver: 256 concurrent clients, and the CI-size soak (client/soak.py) with its
memory check. Bounded by request counts and timeouts; loopback only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tests.reliability.support import DEMO_INPUT, DEMO_OUTPUT, demo_reference, measured
from tests.support.paths import ROOT, SERVER_TOLERANCE
from tests.support.repository import build_demo_repository, keep_in_flight
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer_inputs

pytestmark = pytest.mark.integration

CLIENTS = 256
REQUESTS_PER_CLIENT = 8
BAD_EVERY = 7  # every 7th request is malformed on purpose (wrong inner dimension)


class _InFlight:
    now = 0
    peak = 0


async def _one_client(
    index: int,
    server: LocalTritonServer,
    inputs: list[NDArray[Any]],
    wants: list[NDArray[Any]],
    in_flight: _InFlight,
) -> list[str]:
    """One client of its own (its own connection), a few requests in a row; returns what went wrong."""
    grpc = index % 2 == 1
    module = grpcaio if grpc else httpaio
    client = (
        grpcaio.InferenceServerClient(server.grpc_url)
        if grpc
        else httpaio.InferenceServerClient(server.http_url)
    )
    problems = []
    try:
        for k in range(REQUESTS_PER_CLIENT):
            serial = index * REQUESTS_PER_CLIENT + k
            x = inputs[serial % len(inputs)]
            bad = serial % BAD_EVERY == 0
            if bad:
                x = np.zeros((1, 2011), np.float32)
            in_flight.now += 1
            in_flight.peak = max(in_flight.peak, in_flight.now)
            try:
                result = await asyncio.wait_for(
                    client.infer("demo", infer_inputs(module, {DEMO_INPUT: x})), 120
                )
            except InferenceServerException as error:
                if not (bad and f"unexpected shape for input '{DEMO_INPUT}'" in str(error.message())):
                    problems.append(f"request {serial}: {error.status()} {error.message()}")
                continue
            except Exception as error:
                problems.append(f"request {serial}: no answer ({type(error).__name__}: {error})")
                continue
            finally:
                in_flight.now -= 1
            if bad:
                problems.append(f"request {serial}: a malformed request was answered")
            elif not np.allclose(
                result.as_numpy(DEMO_OUTPUT), wants[serial % len(inputs)], **SERVER_TOLERANCE
            ):
                problems.append(f"request {serial}: wrong answer")
    finally:
        await client.close()
    return problems


def test_256_concurrent_clients_get_no_errors_beyond_the_intended_ones(server: LocalTritonServer) -> None:
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((int(rng.integers(1, 5)), 2010)).astype(np.float32) for _ in range(32)]
    wants = [demo_reference(x) for x in inputs]

    in_flight = _InFlight()

    async def all_clients() -> list[list[str]]:
        return await asyncio.gather(
            *(_one_client(i, server, inputs, wants, in_flight) for i in range(CLIENTS))
        )

    started = time.monotonic()
    problems = [p for client_problems in asyncio.run(all_clients()) for p in client_problems]
    elapsed = time.monotonic() - started
    total = CLIENTS * REQUESTS_PER_CLIENT
    intended = len([s for s in range(total) if s % BAD_EVERY == 0])
    measured(
        f"{CLIENTS} concurrent clients (half HTTP, half gRPC), {total} requests, {intended} malformed on "
        f"purpose: {len(problems)} unintended errors, {elapsed:.1f} s, at most {in_flight.peak} in flight"
    )
    assert problems == [], "\n".join(problems[:20])
    assert in_flight.peak == CLIENTS  # every client had a request in flight at once
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()


@pytest.mark.parametrize("inflight_lanes", [0, 2], ids=["classic", "in-flight"])
def test_soak_ci_size(tmp_path: Path, inflight_lanes: int) -> None:
    """client/soak.py --local as CI runs it: a mixed stream at concurrency 64, every answer checked,
    host memory of tritonserver and its stubs flat after warm-up. `make soak` runs the long one. Also with
    requests kept in flight (2.47 and later; classic on earlier releases)."""
    repository = build_demo_repository(tmp_path / "repository")
    if inflight_lanes:
        keep_in_flight(repository / "demo", inflight_lanes)
    summary_path = tmp_path / "soak.json"
    command = [
        sys.executable,
        "-m",
        "client.soak",
        "--local",
        "--model-repository",
        str(repository),
        "--requests",
        "30000",
        "--duration",
        "75",
        "--concurrency",
        "64",
        "--warmup",
        "10000",
        "--json",
        str(summary_path),
    ]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    output = finished.stdout + finished.stderr
    assert summary_path.exists(), output
    summary = json.loads(summary_path.read_text())
    mode = ", in flight" if inflight_lanes else ""
    measured(
        f"soak (CI size{mode}): {summary['sent']} requests in {summary['elapsed_s']} s at concurrency 64, "
        f"{summary['ok']} ok, {summary['expected_errors']} intended errors, {summary['wrong']} wrong, "
        f"{summary['lost']} lost; RSS {summary['rss_after_warmup_mib']} -> {summary['rss_end_mib']} MiB, "
        f"{summary['rss_readings']} readings; floor growth {summary['memory_growth_mib']} MiB in "
        f"{summary['memory_range_mib']} MiB (limits {summary['memory_limits_mib']})"
    )
    assert finished.returncode == 0, output
    assert summary["wrong"] == 0 and summary["lost"] == 0, summary["problems"]
    assert summary["sent"] == summary["answered"] >= 2000
    assert summary["expected_errors"] > 0 and summary["ok"] > 0
    # the memory verdicts are the soak's (its exit status above); here: they had readings to judge
    assert summary["memory_growth_mib"]["stubs"] is not None
    assert summary["memory_growth_mib"]["tritonserver"] is not None
