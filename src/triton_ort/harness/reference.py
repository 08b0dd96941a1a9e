"""The answer to check against: the same inputs through in-process ONNX Runtime on the CPU; and inputs of
a model's shapes and types to ask it with."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from triton_ort.model.input_ranges import ValueRange


@functools.lru_cache(maxsize=16)
def _session(onnx_path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


def reference_outputs(onnx_path: Path, inputs: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """What in-process ONNX Runtime on CPU says for the same inputs (one session per file, reused)."""
    session = _session(Path(onnx_path).resolve())
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))


class _Tensor(Protocol):
    @property
    def datatype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...


def random_array(
    meta: _Tensor, rows: int, rng: np.random.Generator, value_range: ValueRange | None = None
) -> NDArray[Any]:
    """An array of a model input's type and shape; variable axes take `rows` (the first) or 1; integers
    within `value_range` (both ends) where given, else 0 to 99."""
    shape = [rows if (d < 0 and axis == 0) else (1 if d < 0 else d) for axis, d in enumerate(meta.shape)]
    return random_values(meta.datatype, shape, rng, value_range)


def random_values(
    datatype: str, shape: Sequence[int], rng: np.random.Generator, value_range: ValueRange | None = None
) -> NDArray[Any]:
    """Random values of a Triton datatype: floats normal (uniform within `value_range` where given),
    booleans either, integers within `value_range` (both ends) where given, else 0 to 99."""
    dtype = np.dtype(triton_to_np_dtype(datatype))
    if dtype.kind == "f" and value_range is not None:  # --range on a float input: uniform between the ends
        return rng.uniform(value_range.low, value_range.high, shape).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    low, high = (int(value_range.low), int(value_range.high)) if value_range is not None else (0, 99)
    return rng.integers(low, high, shape, endpoint=True).astype(dtype)


def random_inputs(metas: Sequence[Any], batch: int, seed: int = 0) -> dict[str, NDArray[Any]]:
    """Inputs of the model's shapes and types (TensorMeta from the server's metadata)."""
    rng = np.random.default_rng(seed)
    return {meta.name: random_array(meta, batch, rng) for meta in metas}


def compare(
    got: Mapping[str, NDArray[Any]], want: Mapping[str, NDArray[Any]], rtol: float, atol: float
) -> list[str]:
    """Differences, in words; empty when every output matches (NaN matches NaN)."""
    problems = []
    for name, expected in want.items():
        if name not in got:
            problems.append(f"output {name!r} missing")
            continue
        actual = got[name]
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            problems.append(
                f"output {name!r}: got {actual.dtype}{list(actual.shape)}, "
                f"expected {expected.dtype}{list(expected.shape)}"
            )
        elif expected.dtype.kind not in "fc" and not np.array_equal(actual, expected):
            problems.append(f"output {name!r}: values differ")
        elif expected.dtype.kind in "fc" and not np.allclose(
            actual, expected, rtol=rtol, atol=atol, equal_nan=True
        ):
            worst = float(np.nanmax(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
            problems.append(
                f"output {name!r}: max abs difference {worst:.3g} beyond rtol {rtol}, atol {atol}"
            )
    return problems
