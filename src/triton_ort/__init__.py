"""Zero-copy ONNX Runtime models for Triton Inference Server's Python backend."""

from .errors import ConfigError, InputError, ProviderError, TritonOrtError
from .gather import run_requests
from .instance import ModelInstance
from .options import ModelOptions, parse_options
from .runner import IOBindingRunner
from .session import Placement, create_session, diagnose_missing_cuda_provider

__all__ = [
    "ConfigError",
    "IOBindingRunner",
    "InputError",
    "ModelInstance",
    "ModelOptions",
    "Placement",
    "ProviderError",
    "TritonOrtError",
    "create_session",
    "diagnose_missing_cuda_provider",
    "parse_options",
    "run_requests",
]
