"""The library's exceptions.

Load-time problems (`ConfigError`, `ProviderError`) fail the model load with a message that names the cause
and the fix. Request-time problems (`InputError`) fail one request only; the Triton adapter turns them into a
per-request `TritonError` so the neighbours in the same batch still get their answers.
"""


class TritonOrtError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(TritonOrtError):
    """config.pbtxt, its parameters, or the ONNX file do not fit together."""


class ProviderError(TritonOrtError):
    """The execution provider that was asked for is not usable in this process."""


class InputError(TritonOrtError):
    """One request's tensors do not match what the model expects."""
