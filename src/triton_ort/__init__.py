"""Zero-copy ONNX Runtime models for Triton Inference Server's Python backend."""

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
from .hooks import HookError, Postprocess, Preprocess, Tensors
from .instance import ModelInstance
from .options import ModelOptions, parse_options
from .runner import IOBindingRunner
from .session import Placement, create_session, diagnose_missing_cuda_provider

__all__ = [
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
