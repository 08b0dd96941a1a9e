"""One table of element types, seen from ONNX, Triton and torch.

ONNX Runtime names types as 'tensor(float)', Triton's config as 'TYPE_FP32' and its wire protocol as 'FP32';
IO binding wants ONNX's TensorProto number. Keeping all four in one row means no conversion can drift.

Strings are the one row without a torch dtype: they travel as numpy arrays of bytes, through the host
(string_runner.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ConfigError


@dataclass(frozen=True)
class ElementType:
    onnx_name: str  # as ORT's NodeArg.type spells it, without 'tensor(...)'
    onnx_proto: int  # onnx.TensorProto.DataType value, which IOBinding takes for every type (bf16 too)
    triton_name: str  # wire name; config.pbtxt spells it 'TYPE_' + this (BYTES: TYPE_STRING)
    torch_dtype: torch.dtype | None  # None: strings

    @property
    def is_string(self) -> bool:
        return self.torch_dtype is None

    @property
    def config_name(self) -> str:
        """As config.pbtxt's data_type spells it."""
        return "TYPE_STRING" if self.is_string else f"TYPE_{self.triton_name}"

    @property
    def tensor_dtype(self) -> torch.dtype:
        """The torch dtype of a numeric type (a string has none: callers keep strings apart)."""
        if self.torch_dtype is None:
            raise TypeError(f"{self.triton_name} tensors have no torch dtype")
        return self.torch_dtype


ELEMENT_TYPES: tuple[ElementType, ...] = (
    ElementType("float", 1, "FP32", torch.float32),
    ElementType("uint8", 2, "UINT8", torch.uint8),
    ElementType("int8", 3, "INT8", torch.int8),
    ElementType("uint16", 4, "UINT16", torch.uint16),
    ElementType("int16", 5, "INT16", torch.int16),
    ElementType("int32", 6, "INT32", torch.int32),
    ElementType("int64", 7, "INT64", torch.int64),
    ElementType("bool", 9, "BOOL", torch.bool),
    ElementType("float16", 10, "FP16", torch.float16),
    ElementType("double", 11, "FP64", torch.float64),
    ElementType("uint32", 12, "UINT32", torch.uint32),
    ElementType("uint64", 13, "UINT64", torch.uint64),
    ElementType("bfloat16", 16, "BF16", torch.bfloat16),
    ElementType("string", 8, "BYTES", None),
)

_BY_ONNX = {t.onnx_name: t for t in ELEMENT_TYPES}
_BY_TRITON = {t.triton_name: t for t in ELEMENT_TYPES} | {"STRING": _BY_ONNX["string"]}
_BY_TORCH = {t.torch_dtype: t for t in ELEMENT_TYPES if t.torch_dtype is not None}


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
    return _BY_TORCH.get(dtype)
