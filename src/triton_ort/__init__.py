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
    from .hooks.module import HookError, Postprocess, Preprocess
    from .model.hooks_file import ClientTensor
    from .model.options import ModelOptions, parse_options
    from .model.signature import Tensors
    from .runtime.gather import run_requests
    from .runtime.instance import ModelInstance
    from .runtime.providers import diagnose_missing_cuda_provider
    from .runtime.runner import IOBindingRunner
    from .runtime.session import Placement, create_session

_MODULE_OF = {
    "ConfigError": ".errors",
    "InferenceError": ".errors",
    "InputError": ".errors",
    "ProviderError": ".errors",
    "TritonOrtError": ".errors",
    "Unavailable": ".errors",
    "triton_code": ".errors",
    "run_requests": ".runtime.gather",
    "ClientTensor": ".model.hooks_file",
    "HookError": ".hooks.module",
    "Postprocess": ".hooks.module",
    "Preprocess": ".hooks.module",
    "Tensors": ".model.signature",
    "ModelInstance": ".runtime.instance",
    "ModelOptions": ".model.options",
    "parse_options": ".model.options",
    "IOBindingRunner": ".runtime.runner",
    "Placement": ".runtime.session",
    "create_session": ".runtime.session",
    "diagnose_missing_cuda_provider": ".runtime.providers",
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
