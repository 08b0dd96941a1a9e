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
import base64
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.errors import ConfigError
from triton_ort.harness.reference import random_values
from triton_ort.harness.transport import TensorMeta, tensor_metas
from triton_ort.model.input_ranges import ValueRange, parse_range, value_ranges

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
        help="an input's values, both ends included: integers (default: the served config's input_ranges, "
        "which `triton-ort config` reads from the tables the input indexes, else 0 or 1), or numbers for a "
        "float input (uniform between them; default: normal)",
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


EXAMPLE_LENGTH = 16
"""The length the ready-to-paste --shape of an open-axes message gives each open axis."""


def unsized_inputs(
    metas: Mapping[str, TensorMeta],
    batched: bool,
    skipped: Collection[str],
    sized: Collection[str],
) -> dict[str, tuple[int, ...]]:
    """The inputs whose open axes (beyond the batch axis) nothing sizes, by name: their dims without the
    batch axis (-1 for an open one). `skipped`: inputs left out (optional ones) or given as data; `sized`:
    those a --shape sizes. The one rule of infer, perf and tune: every open axis is sized by --shape or by
    the data given."""
    unsized = {}
    for name, meta in metas.items():
        own = tuple(meta.shape[1:] if batched else meta.shape)
        if name not in skipped and name not in sized and any(d < 0 for d in own):
            unsized[name] = own
    return unsized


def shape_example(unsized: Mapping[str, Sequence[int]]) -> str:
    """--shape options, ready to paste, for every input of `unsized` (each open axis EXAMPLE_LENGTH)."""
    return " ".join(
        f"--shape {name}:" + ",".join(str(d) if d >= 0 else str(EXAMPLE_LENGTH) for d in own)
        for name, own in unsized.items()
    )


def unsized_text(unsized: Mapping[str, Sequence[int]]) -> str:
    """'ids' [any], 'mask' [any, 3]: the inputs and their dims without the batch axis."""
    return ", ".join(f"{name!r} {_text(own)}" for name, own in unsized.items())


def open_axes_error(unsized: Mapping[str, Sequence[int]], data: str) -> RequestError:
    """The one error of infer, perf and tune for inputs whose open axes nothing sizes: every such input at
    once, with --shape options to paste; `data` names the command's data options."""
    what = "input" if len(unsized) == 1 else "inputs"
    return RequestError(
        f"open axes without a size: {what} {unsized_text(unsized)} (dims without the batch axis); give "
        f"every one, e.g. {shape_example(unsized)}, or their data ({data})"
    )


def parse_ranges_option(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    ranges = {}
    for item in items:
        try:
            name, bounds = parse_range(item, "--range")
        except ConfigError as error:
            raise RequestError(str(error)) from None
        ranges[name] = bounds
    return ranges


def input_value_ranges(
    datatypes: Mapping[str, str],
    model_config: Mapping[str, object],
    overrides: Mapping[str, tuple[float, float]],
    graph: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, ValueRange]:
    """value_ranges for the commands: a --range the input cannot take is the request's error."""
    try:
        return value_ranges(datatypes.items(), model_config, overrides, graph)
    except ConfigError as error:
        raise RequestError(str(error)) from None


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


def _json_value(where: str, value: Any, meta: TensorMeta) -> tuple[NDArray[Any], list[int] | None]:
    """One input of an entry as perf_analyzer reads it: a list (flat or nested), {"content": LIST or
    {"b64": TEXT}, "shape": [...]}, or {"b64": TEXT}; the values and the "shape" given (None: none)."""
    shape = None
    if isinstance(value, dict):
        shape = value.get("shape")
        content = value.get("content", value) if "content" in value or "b64" in value else None
        if content is None:
            raise RequestError(
                f'{where}: expected a list, {{"content": ..., "shape": [...]}} or {{"b64": ...}}'
            )
    else:
        content = value
    string = meta.datatype == "BYTES"
    if isinstance(content, dict) and "b64" in content:
        try:
            raw = base64.b64decode(content["b64"], validate=True)
        except (ValueError, TypeError) as error:
            raise RequestError(f"{where}: b64 content is not base64 ({error})") from None
        if string:
            array = np.array([raw], dtype=object)
        else:
            dtype = np.dtype(triton_to_np_dtype(meta.datatype))
            if len(raw) % dtype.itemsize:
                raise RequestError(f"{where}: {len(raw)} b64 bytes are not whole {meta.datatype} values")
            array = np.frombuffer(raw, dtype).copy()
    else:
        try:
            array = np.array(content, dtype=object if string else triton_to_np_dtype(meta.datatype))
        except (ValueError, TypeError) as error:
            raise RequestError(f"{where}: {error}") from None
        if string:
            array = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(array)
    return array, shape


def _json_array(
    where: str, value: Any, meta: TensorMeta, batched: bool, dims: Mapping[str, Sequence[int]]
) -> tuple[NDArray[Any], bool]:
    """An input's array, batch axis first where the model batches, and whether it is one row (perf_analyzer's
    form: a "shape" without the batch axis, or none) rather than a whole batch ("shape" with the batch axis
    first, or a nested list of that rank)."""
    array, shape = _json_value(where, value, meta)
    own = list(dims.get(meta.name) or (meta.shape[1:] if batched else meta.shape))
    if shape is None:
        if array.ndim == len(own) + 1 and batched and array.ndim > 1:
            return array, False
        opened = [i for i, d in enumerate(own) if d < 0]
        if len(opened) == 1 and array.size:  # one open axis: the rest of the values
            fixed = int(np.prod([d for d in own if d >= 0]))
            own[opened[0]] = array.size // fixed if array.size % fixed == 0 else -2
        shape = own
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise RequestError(
            f'{where}: the input\'s dims are {_text(own)}; give its "shape" (without the batch axis) or '
            f"--shape {meta.name}:D1,..."
        )
    whole = batched and len(shape) == len(own) + 1
    if len(shape) != len(own) and not whole:
        raise RequestError(
            f"{where}: shape {list(shape)}, expected {_text(own)} (the input's dims without the batch axis)"
        )
    try:
        array = array.reshape(shape)
    except ValueError:
        raise RequestError(f"{where}: {array.size} values do not fill shape {list(shape)}") from None
    return (array if whole or not batched else array[np.newaxis]), not whole


def read_json_input_data(
    path: Path,
    metas: Mapping[str, TensorMeta],
    batched: bool,
    dims: Mapping[str, Sequence[int]] | None = None,
) -> tuple[list[dict[str, NDArray[Any]]], bool]:
    """perf_analyzer's JSON input data, read as perf_analyzer reads it: {"data": [{NAME: VALUE, ...}, ...]},
    VALUE a list (flat, or nested), {"content": LIST or {"b64": TEXT}, "shape": [...]}, or {"b64": TEXT}; a
    "shape" without the batch axis, or none (then the input's own dims, open ones from `dims`, --shape, or
    from the values where one axis is open). Each entry's arrays batch axis first where the model batches,
    and whether the entries are single rows (perf_analyzer's form, batched_rows makes requests of them) or,
    a "shape" with the batch axis first, whole requests each."""
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
    requests, forms = [], set()
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise RequestError(f"--input-data {path}: data[{index}] is not an object of inputs by name")
        arrays = {}
        for name, value in step.items():
            if name not in metas:
                raise RequestError(
                    f"--input-data {path}: data[{index}] has {name!r}, which is no input of the model "
                    f"({', '.join(metas)})"
                )
            where = f"--input-data {path}: data[{index}] {name!r}"
            arrays[name], row = _json_array(where, value, metas[name], batched, dims or {})
            forms.add(row)
        requests.append(arrays)
    if len(forms) > 1:
        raise RequestError(
            f'--input-data {path}: some "shape"s have the batch axis and some not; give every one without it'
        )
    return requests, forms != {False} and batched


def batched_rows(entries: Sequence[dict[str, NDArray[Any]]], batch: int) -> list[dict[str, NDArray[Any]]]:
    """Requests of `batch` rows from single-row entries, as perf_analyzer fills a batch: consecutive
    entries, from the first again after the last; as many requests as the entries fill (at least one)."""
    count = max(1, -(-len(entries) // batch))
    requests = []
    for first in range(0, count * batch, batch):
        rows = [entries[(first + k) % len(entries)] for k in range(batch)]
        requests.append({name: np.concatenate([row[name] for row in rows]) for name in rows[0]})
    return requests


def json_requests(
    path: Path, metas: Mapping[str, TensorMeta], batched: bool, shapes: Sequence[str], batch: int | None
) -> tuple[list[dict[str, NDArray[Any]]], list[str]]:
    """--input-data FILE.json with --shape and the batch, as perf_analyzer takes them: the requests (single
    rows made into batches of `batch`, default 1; whole batches as they are), and the --shape items left for
    the inputs the file does not give (a --shape of an input it gives sizes its open axes)."""
    dims = {}
    for item in shapes:
        name, given = parse_shape(item)
        if name in metas:
            own = metas[name].shape[1:] if batched else metas[name].shape
            dims[name] = given[1:] if batched and len(given) == len(own) + 1 else given
    entries, rows = read_json_input_data(path, metas, batched, dims)
    named = {name for entry in entries for name in entry}
    rest = [item for item in shapes if parse_shape(item)[0] not in named]
    return (batched_rows(entries, batch or 1) if rows else entries), rest


def _strings(shape: tuple[int, ...], rng: np.random.Generator, text: str | None) -> NDArray[Any]:
    """A BYTES input: --string-data everywhere, or random lowercase words of 8 letters."""
    count = int(np.prod(shape))
    if text is not None:
        words = [text.encode()] * count
    else:
        letters = rng.integers(ord("a"), ord("z") + 1, (count, 8), dtype=np.uint8)
        words = [row.tobytes() for row in letters]
    array = np.empty(count, dtype=object)
    array[:] = words
    return array.reshape(shape)


def read_npz(path: Path) -> dict[str, NDArray[Any]]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise RequestError(f"--inputs {path}: cannot read it as an .npz of arrays ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise RequestError(f"--inputs {path}: one array (.npy); expected an .npz of inputs by name")
    with archive:
        arrays = dict(archive)
    # np.savez writes Python strings as unicode arrays; a BYTES input is sent as UTF-8 bytes
    return {
        name: np.vectorize(str.encode, otypes=[object])(array) if array.dtype.kind == "U" else array
        for name, array in arrays.items()
    }


def build_requests(
    signature: ModelSignature,
    metadata: Mapping[str, Any],
    batch: int | None,
    shapes: Sequence[str] = (),
    npz: Path | None = None,
    string_data: str | None = None,
    seed: int = 0,
    input_data: str = "random",
    ranges: Mapping[str, ValueRange] | None = None,
    data_options: str = "--inputs FILE.npz, --input-data FILE",
) -> tuple[list[dict[str, NDArray[Any]]], int]:
    """The requests to send in turn, and their batch. The first: --inputs (or --input-data FILE) arrays as
    given, --shape inputs and every other required input made up (random or zero; integers within
    `ranges`, request_data), optional ones left out, all checked against the model's config. perf_analyzer's
    JSON input data (--input-data FILE.json, read as perf_analyzer reads it: json_requests) gives requests
    of its entries: each later one replaces the arrays it gives in the first, all of one batch."""
    metas = {meta.name: meta for meta in tensor_metas(metadata, "inputs")}
    batched = signature.max_batch_size > 0
    given = read_npz(npz) if npz else {}
    source = f"--inputs {npz}"
    later: list[dict[str, NDArray[Any]]] = []  # the JSON file's later entries
    if input_data not in INPUT_DATA_MODES:
        path = Path(input_data)
        if path.suffix == ".json":
            (more, *later), shapes = json_requests(path, metas, batched, shapes, batch)
        else:
            more = read_npz(path)
        if set(more) & set(given):
            raise RequestError(
                f"--input-data {input_data} and --inputs {npz} both give {sorted(set(more) & set(given))}"
            )
        given.update(more)
        source = f"--input-data {input_data}"
    if given:
        rows = signature.check_inputs(given)  # names, dtypes, shapes; the batch is their first axis
        if batch is not None and batch != rows:
            raise RequestError(
                f"-b {batch} with {source}: its arrays' batch (first axis) is {rows}; leave -b out"
            )
        batch = rows
    where = "the batch -b gives" if not given else f"{source}'s first axis"
    dims, batch, _ = sized_by_shape(shapes, signature.model, metas, given, source, batched, batch, where)
    batch = 1 if batch is None else batch
    signature.check_batch(batch, "-b {}")
    unsized = unsized_inputs(metas, batched, {*given, *signature.optional_inputs}, dims)
    if unsized:
        raise open_axes_error(unsized, data_options)
    rng = np.random.default_rng(seed)
    mode = input_data if input_data in INPUT_DATA_MODES else "random"
    inputs: dict[str, NDArray[Any]] = {}
    for name, meta in metas.items():
        if name in given:
            inputs[name] = given[name]
            continue
        if name in dims:
            shape = dims[name]
        elif name in signature.optional_inputs:
            continue  # the model's own default applies
        else:
            shape = tuple(meta.shape[1:] if batched else meta.shape)
        full = (batch, *shape) if batched else shape
        if meta.datatype == "BYTES":
            inputs[name] = _strings(full, rng, string_data)
        else:
            inputs[name] = generated(meta.datatype, full, rng, mode, (ranges or {}).get(name))
    signature.check_inputs(inputs)
    requests = [inputs]
    for index, entry in enumerate(later, start=1):
        request = {**inputs, **entry}
        if signature.check_inputs(request) != batch:
            raise RequestError(
                f"--input-data {input_data}: data[{index}] is not of the first entry's batch {batch}"
            )
        requests.append(request)
    return requests, batch
