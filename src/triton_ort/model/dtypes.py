"""One table of element types, seen from ONNX, Triton, torch and numpy.

ONNX Runtime names types as 'tensor(float)', Triton's config as 'TYPE_FP32' and its wire protocol as 'FP32';
IO binding wants ONNX's TensorProto number. Keeping them all in one row means no conversion can drift.

The array libraries' dtypes are named, not imported: torch and numpy spell every numeric type alike, and a
CPU instance runs on numpy without ever importing torch (arrays.py). Strings are the one row without an
array dtype: they travel as numpy arrays of bytes, through the host (string_runner.py); BF16 has no numpy
dtype.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ElementType:
    onnx_name: str  # as ORT's NodeArg.type spells it, without 'tensor(...)'
    onnx_proto: int  # onnx.TensorProto.DataType value, which IOBinding takes for every type (bf16 too)
    triton_name: str  # wire name; config.pbtxt spells it 'TYPE_' + this (BYTES: TYPE_STRING)
    dtype_name: str | None  # as torch and numpy name it; None: strings

    @property
    def is_string(self) -> bool:
        return self.dtype_name is None

    @property
    def config_name(self) -> str:
        """As config.pbtxt's data_type spells it."""
        return "TYPE_STRING" if self.is_string else f"TYPE_{self.triton_name}"

    @functools.cached_property
    def torch_dtype(self) -> torch.dtype | None:
        """The torch dtype (None: strings); imports torch, so only code that runs on torch asks."""
        import torch

        return None if self.dtype_name is None else getattr(torch, self.dtype_name)

    @property
    def tensor_dtype(self) -> torch.dtype:
        """The torch dtype of a numeric type (a string has none: callers keep strings apart)."""
        if self.torch_dtype is None:
            raise TypeError(f"{self.triton_name} tensors have no torch dtype")
        return self.torch_dtype

    @functools.cached_property
    def numpy_dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype of a numeric type; None for strings and for BF16, which numpy lacks."""
        if self.dtype_name is None or self.dtype_name == "bfloat16":
            return None
        return np.dtype(self.dtype_name)


ELEMENT_TYPES: tuple[ElementType, ...] = (
    ElementType("float", 1, "FP32", "float32"),
    ElementType("uint8", 2, "UINT8", "uint8"),
    ElementType("int8", 3, "INT8", "int8"),
    ElementType("uint16", 4, "UINT16", "uint16"),
    ElementType("int16", 5, "INT16", "int16"),
    ElementType("int32", 6, "INT32", "int32"),
    ElementType("int64", 7, "INT64", "int64"),
    ElementType("bool", 9, "BOOL", "bool"),
    ElementType("float16", 10, "FP16", "float16"),
    ElementType("double", 11, "FP64", "float64"),
    ElementType("uint32", 12, "UINT32", "uint32"),
    ElementType("uint64", 13, "UINT64", "uint64"),
    ElementType("bfloat16", 16, "BF16", "bfloat16"),
    ElementType("string", 8, "BYTES", None),
)

_BY_ONNX = {t.onnx_name: t for t in ELEMENT_TYPES}
_BY_TRITON = {t.triton_name: t for t in ELEMENT_TYPES} | {"STRING": _BY_ONNX["string"]}
_BY_DTYPE_NAME = {t.dtype_name: t for t in ELEMENT_TYPES if t.dtype_name is not None}


ZIPMAP_HINT = (
    "a classifier converted by skl2onnx outputs its probabilities through ZipMap as a sequence of maps: "
    "convert it with options={'zipmap': False} (e.g. to_onnx(model, X, options={'zipmap': False})) "
    "for a tensor of probabilities"
)
"""Said wherever a sequence or map input/output is refused: ZipMap is where they come from in practice."""


def from_onnx_type(type_string: str, where: str) -> ElementType:
    """'tensor(float)' -> FP32, 'tensor(string)' -> BYTES. Non-tensor types fail with `where` named."""
    inner = type_string.removeprefix("tensor(").removesuffix(")")
    if type_string.startswith(("seq(", "map(")):
        raise ConfigError(
            f"{where} has ONNX type {type_string!r}, not a tensor; only tensors are served; {ZIPMAP_HINT}"
        )
    if inner not in _BY_ONNX or not type_string.startswith("tensor("):
        raise ConfigError(f"{where} has ONNX type {type_string!r}, which is not a supported tensor type")
    return _BY_ONNX[inner]


def from_triton_type(name: str, where: str) -> ElementType:
    """'TYPE_FP32' or 'FP32' -> FP32; 'TYPE_STRING' or 'BYTES' -> BYTES."""
    wire = name.removeprefix("TYPE_")
    if wire not in _BY_TRITON:
        supported = ", ".join(sorted(t.triton_name for t in ELEMENT_TYPES))
        raise ConfigError(f"{where} has data_type {name!r}; supported: {supported}")
    return _BY_TRITON[wire]


def from_torch_dtype(dtype: torch.dtype) -> ElementType | None:
    return _BY_DTYPE_NAME.get(str(dtype).removeprefix("torch."))
