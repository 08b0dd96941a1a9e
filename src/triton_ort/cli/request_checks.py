"""A request checked against the model's config.pbtxt before it is sent, so that a mistake costs one line
that names what was wrong and what was expected, not a server round trip with a misleading answer.

Triton 23.12 answers batch 0 with an INTERNAL error about the python backend, and a 1-D array with
"batch-size must be <= max_batch_size"; a huge batch is built and sent before the server refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import json_format
from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from triton_ort.harness.transport import tensor_metas


class RequestError(ValueError):
    """A request the model cannot take; the message is one line: what was wrong, what was expected."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str  # Triton wire type, e.g. FP32
    dims: tuple[int, ...]  # without the batch axis; -1 for a variable axis
    optional: bool = False  # `optional: true` in the config: a request may leave it out

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(triton_to_np_dtype(self.datatype))


@dataclass(frozen=True)
class ModelSignature:
    """What config.pbtxt promises a request may look like."""

    model: str
    max_batch_size: int  # 0: the model takes no batch axis
    inputs: tuple[InputSpec, ...]
    output_reshapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Outputs with a `reshape` in the config: the shape the model computes (without the batch axis), which
    the server answers as the output's dims (a scikit-learn label: [N] in the model, [N, 1] on the wire)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelSignature:
        """From the model config as tritonclient returns it in JSON (HTTP, or gRPC with as_json=True)."""
        message = json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
        inputs = tuple(
            InputSpec(
                tensor.name, _wire_type(tensor.data_type), tuple(int(d) for d in tensor.dims), tensor.optional
            )
            for tensor in message.input
        )
        reshapes = {
            tensor.name: tuple(int(d) for d in tensor.reshape.shape)
            for tensor in message.output
            if tensor.HasField("reshape")
        }
        return cls(message.name, message.max_batch_size, inputs, reshapes)

    @property
    def optional_inputs(self) -> frozenset[str]:
        """Inputs a request may leave out (an overridable initializer's default then applies)."""
        return frozenset(spec.name for spec in self.inputs if spec.optional)

    def as_served(self, name: str, array: NDArray[Any], served: tuple[int, ...]) -> NDArray[Any]:
        """An output as the model computes it (ONNX Runtime's, e.g. an --expect file) in the shape the
        server answers (`served`), where the config's reshape maps one to the other; any other array as it
        is, so that a shape that is really different still differs."""
        reshape = self.output_reshapes.get(name)
        batch = served[:1] if self.max_batch_size > 0 else ()
        if reshape is None or array.shape != (*batch, *reshape) or array.size != int(np.prod(served)):
            return array
        return array.reshape(served)

    def check_batch(self, batch: int, given_as: str = "--batch {}") -> None:
        """given_as names where the batch came from, in the message."""
        what = given_as.format(batch)
        if self.max_batch_size == 0:
            if batch != 1:
                raise RequestError(
                    f"{what}: model {self.model!r} takes no batch axis (max_batch_size 0); leave --batch out"
                )
            return
        if not 1 <= batch <= self.max_batch_size:
            raise RequestError(
                f"{what}: expected 1 to {self.max_batch_size} (max_batch_size of model {self.model!r})"
            )

    def check_inputs(self, arrays: Mapping[str, NDArray[Any]]) -> int:
        """Checks arrays given for (some of) the inputs; returns their common batch (1 without batching)."""
        batches = {}
        for name, array in arrays.items():
            spec = self._input(name)
            self._check_dtype(spec, array)
            batches[name] = self._check_shape(spec, array)
        if len(set(batches.values())) > 1:
            given = ", ".join(f"{name} {batch}" for name, batch in batches.items())
            raise RequestError(f"inputs disagree on the batch (first axis): {given}; expected one batch size")
        batch = next(iter(batches.values()), 1)
        if batches:
            self.check_batch(batch, "batch {} (the inputs' first axis)")
        return batch

    def _input(self, name: str) -> InputSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        names = ", ".join(spec.name for spec in self.inputs)
        raise RequestError(f"input {name!r}: model {self.model!r} has no such input; expected one of {names}")

    @staticmethod
    def _check_dtype(spec: InputSpec, array: NDArray[Any]) -> None:
        if spec.datatype == "BYTES" and array.dtype.kind in "SO":
            return  # a .npy holds bytes as 'S' (object arrays need pickle); tritonclient sends both
        if array.dtype != spec.dtype:
            raise RequestError(
                f"input {spec.name!r}: dtype {array.dtype}, expected {spec.dtype} ({spec.datatype}); "
                f"convert it, e.g. array.astype('{spec.dtype}')"
            )

    def _check_shape(self, spec: InputSpec, array: NDArray[Any]) -> int:
        batched = self.max_batch_size > 0
        expected = (["batch"] if batched else []) + [str(d) if d >= 0 else "any" for d in spec.dims]
        wanted = f"expected [{', '.join(expected)}]"
        inner = array.shape[1:] if batched else array.shape
        fits = array.ndim == len(expected) and all(
            d < 0 or d == n for d, n in zip(spec.dims, inner, strict=True)
        )
        if not fits:
            hint = " (the first axis is the batch: one row is shape [1, ...])" if batched else ""
            raise RequestError(f"input {spec.name!r}: shape {list(array.shape)}, {wanted}{hint}")
        return int(array.shape[0]) if batched else 1


def _wire_type(data_type: int) -> str:
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


# --- answers: what perf and tune check of one answer before and after the load -----------------------


@dataclass(frozen=True)
class OutputSpec:
    """What an answer's output must look like: Triton's datatype and the shape with the batch filled in
    (-1 where the model's axis is open)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class SeenOutput:
    """An output as an answer declares it; `nbytes` the bytes that came with it (None: in shared memory,
    or not known)."""

    datatype: str
    shape: tuple[int, ...]
    nbytes: int | None = None


def expected_outputs(metadata: Mapping[str, Any], batch: int, batched: bool) -> list[OutputSpec]:
    specs = []
    for meta in tensor_metas(metadata, "outputs"):
        shape = tuple(batch if (batched and axis == 0) else d for axis, d in enumerate(meta.shape))
        specs.append(OutputSpec(meta.name, meta.datatype, shape))
    return specs


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) if d >= 0 else "any" for d in shape) + "]"


def check_answer(expected: Sequence[OutputSpec], seen: Mapping[str, SeenOutput]) -> list[str]:
    """What is wrong with an answer, in words (empty: nothing): an output missing or unasked for, another
    datatype, another shape, or a byte count that does not match its shape."""
    problems = []
    for spec in expected:
        got = seen.get(spec.name)
        if got is None:
            problems.append(f"output {spec.name!r} missing")
            continue
        if got.datatype != spec.datatype:
            problems.append(f"output {spec.name!r}: datatype {got.datatype}, expected {spec.datatype}")
        fits = len(got.shape) == len(spec.shape) and all(
            e < 0 or e == g for e, g in zip(spec.shape, got.shape, strict=True)
        )
        if not fits:
            problems.append(
                f"output {spec.name!r}: shape {list(got.shape)}, expected {_shape_text(spec.shape)}"
            )
        elif got.nbytes is not None and got.datatype == spec.datatype and spec.datatype != "BYTES":
            size = int(np.prod(got.shape)) * np.dtype(triton_to_np_dtype(spec.datatype)).itemsize
            if got.nbytes != size:
                problems.append(
                    f"output {spec.name!r}: {got.nbytes} bytes for shape {list(got.shape)}, expected {size}"
                )
    names = {spec.name for spec in expected}
    problems += [f"output {name!r}: not an output of the model" for name in seen if name not in names]
    return problems


def seen_outputs(result: Any, in_shared_memory: bool = False) -> dict[str, SeenOutput]:
    """The outputs an InferResult (HTTP or gRPC, sync or async) declares, without decoding their data.
    `in_shared_memory`: the outputs were requested into shared-memory regions (--cuda-shm); their bytes
    are in the regions, so only datatype and shape can be checked (gRPC answers each with empty contents
    and no parameter that says so)."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP: JSON header, binary data after it
        return {
            out["name"]: SeenOutput(
                out["datatype"],
                tuple(int(d) for d in out["shape"]),
                None if in_shared_memory else out.get("parameters", {}).get("binary_data_size"),
            )
            for out in response.get("outputs", [])
        }
    raw = list(response.raw_output_contents)
    known = not in_shared_memory and len(raw) == len(response.outputs)
    return {
        out.name: SeenOutput(out.datatype, tuple(int(d) for d in out.shape), len(raw[i]) if known else None)
        for i, out in enumerate(response.outputs)
    }
