"""Zero-copy ONNX Runtime models for Triton Inference Server's Python backend."""

from .errors import ConfigError, InputError, ProviderError, TritonOrtError
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
    "InputError",
    "ModelInstance",
    "ModelOptions",
    "Placement",
    "Postprocess",
    "Preprocess",
    "ProviderError",
    "Tensors",
    "TritonOrtError",
    "create_session",
    "diagnose_missing_cuda_provider",
    "parse_options",
    "run_requests",
]
