"""The Python-based Triton backend `onnxruntime_zerocopy`: serve an ONNX file with a config of a few lines.

Triton (core's backend_model.cc, ResolveBackendPaths, 23.12 on) serves a model whose config says
`backend: "X"` with `<backend dir>/X/libtriton_X.so`, or, when there is none, with
`<backend dir>/X/model.py` run by the python backend (`<backend dir>/python/libtriton_python.so`, whose
stub and triton_python_backend_utils.py are used from there when X's folder has none). So the backend is one
file, installed by `python -m triton_ort.backend install --backend-directory DIR`.

That file (MODEL_PY) is also what a model's own copy of model.py contains (model_repository/demo/1/model.py
is byte-identical, and a unit test keeps it so): one import of the adapter, triton_ort.backend.model. The
python-backend stub imports a model's model.py as the module `<version>.model` and a backend's as `model`
(python_backend's pb_stub.cc, ModelContext::StubSetup), and looks up only its TritonPythonModel attribute,
so a re-export works in both. The adapter then always comes from the installed triton_ort, the same
version as the library it drives: no stale copy of it can outlive an upgrade.
"""

from __future__ import annotations

from pathlib import Path

BACKEND_NAME = "onnxruntime_zerocopy"

MODEL_PY = '''"""Serves any ONNX model zero-copy through ONNX Runtime: the triton_ort library's adapter.

Used as the backend `onnxruntime_zerocopy` (python -m triton_ort.backend install --backend-directory DIR),
or copied next to a model's ONNX file (config.pbtxt: backend "python"). Needs triton_ort installed in the
Python that the python-backend stub runs.
"""

from triton_ort.backend.model import TritonPythonModel

__all__ = ["TritonPythonModel"]
'''


def install(backend_directory: Path) -> Path:
    """Write `<backend_directory>/onnxruntime_zerocopy/model.py`; returns its path.

    The python backend must be installed beside it (`<backend_directory>/python`), as in Triton's images."""
    target = backend_directory / BACKEND_NAME / "model.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(MODEL_PY)
    return target
