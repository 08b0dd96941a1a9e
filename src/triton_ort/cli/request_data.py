"""The request data `infer` and `perf` make up or read, in one syntax for both: `--shape`, `--range`,
`--input-data zero|random|FILE` (docs/serving-your-model.md, "Inputs that fit the model").

- `--shape NAME:D1,D2,...` gives an input's dims without the batch axis, as perf_analyzer's `--shape`
  (the batch is `--batch`/`-b`). `NAME=D1,D2,...` is read the same way; either spelling may also give the
  whole shape, batch axis first, which then sets the batch.
- Integer inputs take values in their range (triton_ort.model.input_ranges.value_ranges):
  `--range NAME=LO:HI`, else the served config's `input_ranges`, else 0 or 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from triton_ort.cli.request_checks import RequestError
from triton_ort.errors import ConfigError
from triton_ort.harness.reference import random_values
from triton_ort.harness.transport import TensorMeta
from triton_ort.model.input_ranges import ValueRange, parse_range

INPUT_DATA_MODES = ("random", "zero")


def add_request_data_options(parser: argparse.ArgumentParser) -> None:
    """--input-data, --range and --verbose, as infer and perf take them."""
    parser.add_argument(
        "--input-data",
        default="random",
        metavar="random|zero|FILE",
        help="made-up inputs (random, the default, or zeros), or a file: an .npz of inputs by name, or "
        "perf_analyzer's JSON input data",
    )
    parser.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="NAME=LO:HI",
        help="an integer input's values, both ends included (default: the served config's input_ranges, "
        "which auto-complete reads from the tables the input indexes, else 0 or 1)",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="say which values each integer input got, and why"
    )


def parse_shape(item: str) -> tuple[str, tuple[int, ...]]:
    """--shape NAME:D1,D2,... (or NAME=D1,D2,...): the name and the dims as given."""
    colon, equals = item.rfind(":"), item.find("=")
    cut = equals if equals >= 0 and (colon < 0 or equals < colon) else colon
    name, text = item[:cut], item[cut + 1 :]
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if cut < 0 or not name or not dims or any(d < 1 for d in dims):
        raise RequestError(
            f"--shape {item!r}: expected NAME:D1,D2,... with the input's dims without the batch axis "
            "(e.g. input_ids:128)"
        )
    return name, dims


def shape_of(
    item: str, dims: tuple[int, ...], own: Sequence[int], batched: bool
) -> tuple[tuple[int, ...], int | None]:
    """A --shape's dims without the batch axis, and the batch it sets (None: it sets none). `own` is the
    input's served dims without the batch axis (-1 for an open one)."""
    if batched and len(dims) == len(own) + 1:
        whole, batch = dims[1:], dims[0]
    elif len(dims) == len(own):
        whole, batch = dims, None
    else:
        expected = f"{len(own)} dims" + (f" (or {len(own) + 1} with the batch axis first)" if batched else "")
        raise RequestError(f"--shape {item}: expected {expected}, like {_text(own)}")
    if not all(d < 0 or d == s for d, s in zip(own, whole, strict=True)):
        raise RequestError(f"--shape {item}: the input's dims are {_text(own)}; a fixed dim cannot change")
    return whole, batch


def sized_by_shape(
    items: Sequence[str],
    model: str,
    metas: Mapping[str, TensorMeta],
    given: Collection[str],
    source: str,
    batched: bool,
    batch: int | None,
    where: str,
) -> tuple[dict[str, tuple[int, ...]], int | None, str]:
    """The --shape options: each input's dims without the batch axis, and the batch, which a whole shape
    (batch axis first) sets; it must agree with `batch`, which `where` names (the files' first axis, -b).
    An input named twice (here and in `source`, the inputs `given`) or not at all is an error."""
    dims: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, shape = parse_shape(item)
        if name not in metas:
            raise RequestError(
                f"--shape {item}: model {model!r} has no input {name!r}; expected one of {', '.join(metas)}"
            )
        if name in given:
            raise RequestError(f"--shape {item}: {name!r} is in {source} too; give it once")
        own = metas[name].shape[1:] if batched else metas[name].shape
        dims[name], whole_batch = shape_of(item, shape, own, batched)
        if whole_batch is not None:
            if batch is not None and batch != whole_batch:
                raise RequestError(f"--shape {item}: its batch {whole_batch} is not {where}, {batch}")
            batch, where = whole_batch, f"--shape {item}'s first axis"
    return dims, batch, where


def _text(dims: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) if d >= 0 else "any" for d in dims) + "]"


def parse_ranges_option(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    ranges = {}
    for item in items:
        try:
            name, bounds = parse_range(item, "--range")
        except ConfigError as error:
            raise RequestError(str(error)) from None
        ranges[name] = bounds
    return ranges


def check_range_names(ranges: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in ranges:
        if name not in names:
            raise RequestError(
                f"--range {name}=...: the model has no input {name!r}; one of {', '.join(names)}"
            )


def generated(
    datatype: str, shape: Sequence[int], rng: np.random.Generator, mode: str, value_range: ValueRange | None
) -> NDArray[Any]:
    """One input's made-up values: zeros, or random (harness.reference.random_values)."""
    if mode == "zero":
        return np.zeros(shape, np.dtype(triton_to_np_dtype(datatype)))
    return random_values(datatype, shape, rng, value_range)


def read_json_input_data(path: Path, datatypes: Mapping[str, str]) -> list[dict[str, NDArray[Any]]]:
    """perf_analyzer's JSON input data: {"data": [{NAME: [values...] or {"content": [...], "shape": [...]},
    ...}, ...]}, one entry per request's data. A flat list takes the input's shape from its "shape" or,
    without one, stays flat (one axis); "shape" is the whole shape here, batch axis first where the model
    batches."""
    try:
        document = json.loads(path.read_text())
        steps = document["data"]
        if not isinstance(steps, list) or not steps:
            raise ValueError('"data" is not a non-empty list')
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RequestError(
            f'--input-data {path}: not perf_analyzer\'s JSON input data {{"data": [{{NAME: values}}, ...]}} '
            f"({error})"
        ) from None
    requests = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise RequestError(f"--input-data {path}: data[{index}] is not an object of inputs by name")
        arrays = {}
        for name, value in step.items():
            if name not in datatypes:
                raise RequestError(
                    f"--input-data {path}: data[{index}] has {name!r}, which is no input of the model "
                    f"({', '.join(datatypes)})"
                )
            content, shape = (
                (value.get("content"), value.get("shape")) if isinstance(value, dict) else (value, None)
            )
            dtype = object if datatypes[name] == "BYTES" else triton_to_np_dtype(datatypes[name])
            array = np.array(content, dtype=dtype)
            if dtype is object:
                array = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(
                    array
                )
            if shape is not None:
                try:
                    array = array.reshape(shape)
                except ValueError as error:
                    raise RequestError(f"--input-data {path}: data[{index}] {name!r}: {error}") from None
            arrays[name] = array
        requests.append(arrays)
    return requests
