"""The python backend's DLPack layout rule, for tests of what our outputs hand to it."""

from __future__ import annotations

import torch


def python_backend_accepts(tensor: torch.Tensor) -> bool:
    """pb_utils.Tensor.from_dlpack's layout check (python_backend src/pb_tensor.cc, r23.12 and r24.10):
    every axis but the first whose size is not 1 must have the C-order stride, empty axes included."""
    expected = 1
    for size, stride in zip(reversed(tensor.shape[1:]), reversed(tensor.stride()[1:]), strict=True):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True
