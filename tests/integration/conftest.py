from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.repository import build_test_repository
from triton_ort.harness.server import LocalTritonServer


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("repository"))


@pytest.fixture(scope="session")
def server(test_repository: Path) -> Iterator[LocalTritonServer]:
    """One real tritonserver for the module's tests, with the library's per-execute debug lines on."""
    with LocalTritonServer(test_repository, log_verbose=1, env={"TRITON_ORT_LOG_LEVEL": "DEBUG"}) as running:
        yield running
