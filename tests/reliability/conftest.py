from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.support import MEASUREMENTS
from tests.support.repository import build_reliability_repository
from triton_ort.harness.releases import Release, server_release
from triton_ort.harness.server import LocalTritonServer


@pytest.fixture(scope="session")
def reliability_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_reliability_repository(tmp_path_factory.mktemp("reliability_repository"))


@pytest.fixture(scope="session")
def server(reliability_repository: Path) -> Iterator[LocalTritonServer]:
    """One tritonserver with every reliability model, shared by the bad-input and load tests."""
    with LocalTritonServer(reliability_repository) as running:
        yield running


@pytest.fixture(scope="session")
def release(server: LocalTritonServer) -> Release:
    """What the running Triton release answers its own way (status codes, wording, stub restarts)."""
    return server_release(server.http_url)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASUREMENTS:
        terminalreporter.section("reliability measurements")
        for line in MEASUREMENTS:
            terminalreporter.write_line(line)
