"""The python backend's own Python module, for unit tests of what our code hands it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def python_backend_utils() -> Any:
    """The real triton_python_backend_utils.py of the installed tritonserver (it imports only numpy)."""
    import importlib.util

    import pytriton

    path = Path(pytriton.__file__).parent / "tritonserver/backends/python/triton_python_backend_utils.py"
    spec = importlib.util.spec_from_file_location("pb_utils_for_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
