from __future__ import annotations

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
