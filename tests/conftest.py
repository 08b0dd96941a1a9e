from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest


def _cuda_ready() -> bool:
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers()


# What one run writes under pytest's temp folder at most (0.9 GiB measured on 2026-12-05: servers' work
# folders, built models, the packed execution env, downloaded wheels), with room to spare.
NEEDED_DISK_BYTES = 2 << 30


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, in one line, where the disk cannot hold a run: otherwise hundreds of tests fail at
    setup, each with a traceback of its own, and the cause is lost among them."""
    folder = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    free = shutil.disk_usage(folder).free
    if free < NEEDED_DISK_BYTES:
        pytest.exit(
            f"only {free / 2**20:.0f} MiB free on the disk of {folder}; the tests write up to about "
            f"{NEEDED_DISK_BYTES / 2**30:.0f} GiB there (free space, or point --basetemp elsewhere)",
            returncode=1,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_ready():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and onnxruntime-gpu (run on the GPU test host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _temp_dir_of_this_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Temp files of this run (launcher work folders, the kept logs of the failed starts that tests provoke
    on purpose) go under pytest's own base temp folder, which pytest prunes (it keeps the last 3 runs),
    and not into /tmp, where nothing would ever remove them. Subprocesses inherit it through TMPDIR."""
    folder = tmp_path_factory.mktemp("tmp")
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)  # gettempdir() caches its first answer
    yield
    tempfile.tempdir = saved[1]
    if saved[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[0]
