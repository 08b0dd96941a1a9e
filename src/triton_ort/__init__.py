"""Zero-copy ONNX Runtime models for Triton Inference Server's Python backend.

The names below load on first use (PEP 562): `import triton_ort.harness...` must not import torch and
ONNX Runtime, so that the smoke client's image (tritonclient, numpy, CPU onnxruntime; no torch) can use
the harness.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import (
        ConfigError,
        InferenceError,
        InputError,
        ProviderError,
        TritonOrtError,
        Unavailable,
        triton_code,
    )
    from .gather import run_requests
    from .hook_tensors import ClientTensor
    from .hooks import HookError, Postprocess, Preprocess, Tensors
    from .instance import ModelInstance
    from .options import ModelOptions, parse_options
    from .providers import diagnose_missing_cuda_provider
    from .runner import IOBindingRunner
    from .session import Placement, create_session

_MODULE_OF = {
    "ConfigError": ".errors",
    "InferenceError": ".errors",
    "InputError": ".errors",
    "ProviderError": ".errors",
    "TritonOrtError": ".errors",
    "Unavailable": ".errors",
    "triton_code": ".errors",
    "run_requests": ".gather",
    "ClientTensor": ".hook_tensors",
    "HookError": ".hooks",
    "Postprocess": ".hooks",
    "Preprocess": ".hooks",
    "Tensors": ".hooks",
    "ModelInstance": ".instance",
    "ModelOptions": ".options",
    "parse_options": ".options",
    "IOBindingRunner": ".runner",
    "Placement": ".session",
    "create_session": ".session",
    "diagnose_missing_cuda_provider": ".providers",
}

__all__ = [
    "ClientTensor",
    "ConfigError",
    "HookError",
    "IOBindingRunner",
    "InferenceError",
    "InputError",
    "ModelInstance",
    "ModelOptions",
    "Placement",
    "Postprocess",
    "Preprocess",
    "ProviderError",
    "Tensors",
    "TritonOrtError",
    "Unavailable",
    "create_session",
    "diagnose_missing_cuda_provider",
    "parse_options",
    "run_requests",
    "triton_code",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name], __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value
