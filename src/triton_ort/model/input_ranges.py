"""What values a model's integer inputs accept: for the clients that make up inputs (triton-ort infer and
perf, the soak), since random integers are wrong data for any input that indexes a table (token ids,
token types, positions, categories): ORT refuses the whole request ("indices element out of data bounds").

Read from the graph: an integer input that reaches the indices of a Gather (or of ORT's fused
EmbedLayerNormalization), directly or through ops that only move or retype values (Cast, Unsqueeze,
Reshape, ...), accepts 0 to the table's first dimension minus one; the smallest table wins. A config states
them as the parameter `input_ranges` ("NAME=LO:HI ..."), which `triton-ort config` prints from the graph
(Triton does not serve what auto-complete adds to `parameters`: core takes only max_batch_size, inputs,
outputs and batching from it), and any client reads from `GET /v2/models/NAME/config`. The clients
(`value_ranges`) take `--range NAME=LO:HI` first, then that parameter, then 0 or 1: small non-negative
values, which every table of two rows or more accepts (token ids, token types, positions, categories).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import onnx  # imported where a graph is read: the client image ships the clients without onnx

PARAMETER = "input_ranges"
DEFAULT_RANGE = (0, 1)
# Ops whose output holds the same values as their first input (moved, repeated, retyped or cut).
_PASS_THROUGH = frozenset(
    {
        "Cast",
        "Concat",
        "Expand",
        "Flatten",
        "Identity",
        "Reshape",
        "Slice",
        "Squeeze",
        "Tile",
        "Transpose",
        "Unsqueeze",
    }
)
# (domain, op type) -> {index of an indices input: index of the table it indexes}
_INDEXING: dict[tuple[str, str], dict[int, int]] = {
    ("", "Gather"): {1: 0},
    # input_ids -> word_embedding, segment_ids -> segment_embedding, position_ids -> position_embedding
    ("com.microsoft", "EmbedLayerNormalization"): {0: 2, 1: 4, 8: 3},
}
# Triton's datatype names, which are also ONNX's names of the same element types (TensorProto.DataType).
_INTEGER_DATATYPES = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})
# A float input takes --range too (uniform values between the ends); tables index only integer inputs.
_FLOAT_DATATYPES = frozenset({"FP16", "BF16", "FP32", "FP64"})
# Where no range is known: what -v says, and how to give one.
NO_RANGE = (
    "no input_ranges in the served config (Triton does not serve auto-complete's: `triton-ort config "
    "DIR/MODEL` prints the line for config.pbtxt), --range not given: small non-negative values"
)
ROWS_LESS_ONE = "ROWS-1"
NO_RANGE_FIX = "(ROWS: the rows of the table the input indexes, e.g. input_ids=0:30521 for BERT's vocabulary)"


@dataclass(frozen=True)
class ValueRange:
    """Values from `low` to `high`, both included, and why."""

    low: float
    high: float
    why: str


def _table_rows(graph: onnx.GraphProto, name: str, axis: int) -> int | None:
    """The size of axis `axis` of a table that is an initializer or a Constant node's value."""
    for initializer in graph.initializer:
        if initializer.name == name:
            dims = list(initializer.dims)
            return dims[axis] if -len(dims) <= axis < len(dims) else None
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attribute in node.attribute:
                if attribute.name == "value":
                    dims = list(attribute.t.dims)
                    return dims[axis] if -len(dims) <= axis < len(dims) else None
    return None


def _gather_axis(node: onnx.NodeProto) -> int:
    for attribute in node.attribute:
        if attribute.name == "axis":
            return int(attribute.i)
    return 0


def index_ranges(model: onnx.ModelProto) -> dict[str, ValueRange]:
    """The integer graph inputs that index a table of known size, with the range that table accepts."""
    import onnx

    graph = model.graph
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
    initializers = {initializer.name for initializer in graph.initializer}
    found: dict[str, ValueRange] = {}
    for graph_input in graph.input:
        if graph_input.name in initializers:
            continue
        if onnx.TensorProto.DataType.Name(graph_input.type.tensor_type.elem_type) not in _INTEGER_DATATYPES:
            continue
        best: ValueRange | None = None
        seen, frontier = {graph_input.name}, [graph_input.name]
        while frontier:
            for node, index in consumers.get(frontier.pop(), []):
                tables = _INDEXING.get((node.domain if node.domain != "ai.onnx" else "", node.op_type), {})
                if index in tables and len(node.input) > tables[index]:
                    axis = _gather_axis(node) if node.op_type == "Gather" else 0
                    rows = _table_rows(graph, node.input[tables[index]], axis)
                    if rows is not None and rows > 0 and (best is None or rows - 1 < best.high):
                        what = f"{node.op_type} {node.name!r}" if node.name else node.op_type
                        best = ValueRange(0, rows - 1, f"indexes the {rows}-row table of {what}")
                elif node.op_type in _PASS_THROUGH and index == 0:
                    for output in node.output:
                        if output not in seen:
                            seen.add(output)
                            frontier.append(output)
        if best is not None:
            found[graph_input.name] = best
    return found


def index_ranges_in_file(path: Path) -> dict[str, ValueRange]:
    """index_ranges of an ONNX file, its external weights left unread (only the tables' shapes count)."""
    from .onnx_files import read_onnx_file  # imports onnx: see the TYPE_CHECKING import above

    return index_ranges(read_onnx_file(path))


def format_ranges(ranges: Mapping[str, tuple[int, int] | ValueRange]) -> str:
    """The parameter's value: "NAME=LO:HI NAME=LO:HI" (names in the graph's order)."""
    items = []
    for name, value in ranges.items():
        low, high = (value.low, value.high) if isinstance(value, ValueRange) else value
        items.append(f"{name}={low}:{high}")
    return " ".join(items)


def parse_range(text: str, what: str) -> tuple[str, tuple[float, float]]:
    """One NAME=LO:HI (both ends included; integers, or numbers for a float input); ConfigError naming
    `what` otherwise."""
    name, equals, bounds = text.partition("=")
    low_text, colon, high_text = bounds.partition(":")
    low: float
    high: float
    try:
        low, high = _number(low_text), _number(high_text)
    except ValueError:
        low, high = 1, 0
    if not name or not equals or not colon or low > high:
        raise ConfigError(
            f"{what}: {text!r} is not NAME=LO:HI with numbers LO <= HI (e.g. input_ids=0:30521, or "
            "scale=-1.5:1.5 for a float input)"
        )
    return name, (low, high)


def _number(text: str) -> float:
    """An integer as int, else a finite float (ValueError otherwise)."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def parse_ranges(text: str, what: str = f"parameter {PARAMETER!r}") -> dict[str, tuple[float, float]]:
    return dict(parse_range(item, what) for item in text.split())


def served_ranges(model_config: Mapping[str, object]) -> dict[str, tuple[float, float]]:
    """The `input_ranges` parameter of a served config (Triton's JSON form), {} where it has none."""
    parameters = model_config.get("parameters") or {}
    entry = parameters.get(PARAMETER) if isinstance(parameters, Mapping) else None
    if not isinstance(entry, Mapping):
        return {}
    try:
        return parse_ranges(str(entry.get("string_value", "")))
    except ConfigError:
        return {}  # a config the server refuses does not serve; nothing to follow here


def value_ranges(
    inputs: Iterable[tuple[str, str]],
    model_config: Mapping[str, object],
    overrides: Mapping[str, tuple[float, float]],
    graph: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, ValueRange]:
    """For each integer input (name, Triton datatype): the range its generated values take, and why: the
    client's --range, else the served config's input_ranges, else `graph` (what the ONNX file's tables
    give, where the client has the model folder: tune), else 0 or 1. A float input takes --range alone;
    --range on any other input (BOOL, BYTES) is refused, not ignored."""
    served = served_ranges(model_config)
    ranges = {}
    for name, datatype in inputs:
        if datatype in _FLOAT_DATATYPES and name in overrides:
            ranges[name] = ValueRange(*overrides[name], "--range, uniform")
        elif datatype not in _INTEGER_DATATYPES:
            if name in overrides:
                raise ConfigError(f"--range {name}=...: input {name!r} is {datatype}; --range takes numbers")
        elif name in overrides:
            if not all(float(end).is_integer() for end in overrides[name]):
                raise ConfigError(
                    f"--range {name}=...: input {name!r} is {datatype}; its ends must be integers"
                )
            low, high = overrides[name]
            ranges[name] = ValueRange(int(low), int(high), "--range")
        elif name in served:
            ranges[name] = ValueRange(*served[name], f"the served config's parameter {PARAMETER}")
        elif graph and name in graph:
            ranges[name] = ValueRange(*graph[name], "the model's ONNX file (the table it indexes)")
        else:
            ranges[name] = ValueRange(*DEFAULT_RANGE, NO_RANGE)
    return ranges


def describe(ranges: Mapping[str, ValueRange]) -> list[str]:
    """One line per input, for --verbose; where no range is known, also what to do (the --range to give)."""
    return [
        f"input {name!r}: {'numbers' if 'uniform' in r.why else 'integers'} {r.low} to {r.high} ({r.why})"
        + (f"; give --range {name}=0:{ROWS_LESS_ONE} {NO_RANGE_FIX}" if r.why == NO_RANGE else "")
        for name, r in ranges.items()
    ]
