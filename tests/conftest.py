from __future__ import annotations

import os
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
