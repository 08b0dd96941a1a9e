"""The installed distributions that provide the `onnxruntime` module, read from package metadata without
importing it: a missing, broken or shadowed ONNX Runtime must still be described (stack.py before anything
starts, providers.py when a session has no CUDA provider)."""

from __future__ import annotations

import importlib.metadata
import re

ORT_DISTRIBUTIONS = re.compile(r"^(onnxruntime(-[a-z0-9-]+)?|ort-nightly(-[a-z0-9-]+)?)$")
"""The names a distribution of the `onnxruntime` module goes by; a name alone is not enough: packages
beside ONNX Runtime share the prefix (onnxruntime-extensions ships the module `onnxruntime_extensions`)."""


def _provides_module(dist: importlib.metadata.Distribution) -> bool:
    """Whether the distribution installs the `onnxruntime` package (its RECORD lists
    onnxruntime/__init__.py); one without a RECORD is taken at its name."""
    files = dist.files
    return files is None or any(str(path) == "onnxruntime/__init__.py" for path in files)


def ort_distributions() -> dict[str, str]:
    """Installed distributions that provide the `onnxruntime` module -> their versions."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if ORT_DISTRIBUTIONS.match(name) and _provides_module(dist):
            found[name] = dist.version
    return found


def listed(distributions: dict[str, str]) -> str:
    """'onnxruntime==1.20.1, onnxruntime-gpu==1.20.1', or 'none'."""
    return ", ".join(f"{name}=={version}" for name, version in sorted(distributions.items())) or "none"
