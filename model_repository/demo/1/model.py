"""Serves any ONNX model zero-copy through ONNX Runtime: the triton_ort library's adapter.

Used as the backend `onnxruntime_zerocopy` (python -m triton_ort.backend install --backend-directory DIR),
or copied next to a model's ONNX file (config.pbtxt: backend "python"). Needs triton_ort installed in the
Python that the python-backend stub runs.
"""

from triton_ort.backend.model import TritonPythonModel

__all__ = ["TritonPythonModel"]
