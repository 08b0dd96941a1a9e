"""`triton-ort perf --cuda-shm` on a GPU host (docs/gpu-host.md), skipped elsewhere: the demo measured over
HTTP and gRPC with its inputs and outputs in CUDA shared memory (a set of regions per request in flight),
every answer checked, Triton's stages beside the client's figures, and no region left registered with the
server afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.repository import build_test_repository
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import make_client

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    with LocalTritonServer(
        build_test_repository(tmp_path_factory.mktemp("perf_gpu") / "repository")
    ) as running:
        yield running


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_cuda_shm_measures_the_demo_and_leaves_no_region(
    server: LocalTritonServer, tmp_path: Path, protocol: str
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    report = tmp_path / "perf.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "triton_ort.cli", "perf", "demo", "-i", protocol, "-u", url),
            *("--cuda-shm", "-b", "100", "--concurrency", "1", "4", "--measurement-interval", "500"),
            *("--max-windows", "6", "--json", str(report), "--plot", str(tmp_path / "perf.svg")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads(report.read_text())
    assert measured["transport"] == "cuda-shm" and measured["batch"] == 100
    assert [p["concurrency"] for p in measured["points"]] == [1, 4]
    for point in measured["points"]:
        assert point["requests"] > 0 and 0 < point["p50_us"] <= point["p99_us"]
        assert point["server_us"]["compute_infer"] > 0
    assert (tmp_path / "perf.svg").read_text().startswith("<svg")
    client = make_client(protocol, url)
    status = client.get_cuda_shared_memory_status()
    regions = status if isinstance(status, list) else list(status.regions)
    assert regions == [], regions
