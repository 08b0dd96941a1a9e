"""The host-only path of a model with strings: session.run, as Triton's native onnxruntime backend sends
strings through the host.

ORT's IO binding and OrtValues refuse string data, so such a model's strings travel as numpy arrays of
bytes (Triton's BYTES, as `as_numpy()` gives them), given to ORT as str, which ORT encodes into its own
strings (the conversion its Python API requires); its numeric inputs go as OrtValues over their memory
(a torch tensor through DLPack, a numpy array as it is: no copy, on the host or the device), and its
outputs come back on the host (numeric ones as the runner's arrays, strings as numpy arrays of str). Such a
model does not gather requests: each runs alone (the answers of requests of different lengths stay each
their own).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import InputError
from ..model.signature import TensorSpec
from .arrays import Arrays
from .stats import RunnerStats


def run_with_strings(
    session: ort.InferenceSession,
    specs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    tensors: Mapping[str, Any],
    arrays: Arrays,
) -> dict[str, Any]:
    """One session.run of checked inputs (`specs`: the inputs it binds); ORT synchronises, so its outputs
    are complete host arrays on return."""
    stats: RunnerStats = arrays.stats
    started = time.perf_counter()
    feeds = {
        spec.name: _string_feed(spec.name, tensors[spec.name])
        if spec.element_type.is_string
        else _numeric_feed(arrays.to_device(tensors[spec.name]), stats)
        for spec in specs
    }
    ran = time.perf_counter()
    stats.bind_seconds += ran - started
    results = session.run(None, feeds)
    stats.ort_run_seconds += time.perf_counter() - ran
    stats.ort_runs += 1
    return {
        spec.name: value if spec.element_type.is_string else arrays.from_numpy(value)
        for spec, value in zip(outputs, results, strict=True)
    }


def _numeric_feed(tensor: Any, stats: RunnerStats) -> Any:
    """A numeric input beside strings: a numpy array as it is; a torch tensor as an OrtValue over its memory
    where ORT's OrtValue has from_dlpack (1.31 has it); on ORT 1.23 (the last release for Python 3.10),
    which lacks it, a numpy view on the host, or one copy to the host from the device."""
    if isinstance(tensor, np.ndarray):
        return tensor
    if hasattr(ort.OrtValue, "from_dlpack"):
        return ort.OrtValue.from_dlpack(tensor)
    if tensor.device.type == "cpu":
        return tensor.numpy()
    stats.device_to_host_copies += 1
    return tensor.cpu().numpy()


def _string_feed(name: str, strings: Any) -> Any:
    """Triton's BYTES (a numpy object array of bytes) as ORT's Python API takes strings: str, which it
    encodes into its own strings (the one copy it needs). Bytes objects would reach ORT as their repr, and a
    fixed-width bytes array ('S') as C strings that run into the next one when a string fills its width."""
    if strings.dtype != object:
        return strings
    try:
        return np.array([s.decode() if isinstance(s, bytes) else s for s in strings.flat], object).reshape(
            strings.shape
        )
    except UnicodeDecodeError as error:
        raise InputError(
            f"input {name!r}: BYTES must be UTF-8 text for ONNX Runtime's string tensors ({error})"
        ) from error
