"""ONNX files: read one way (without external weights), walked one way (every subgraph),
and written so that the installed ONNX Runtime can read them: one opset, and the IR version it needs.

`onnx.helper.make_model` stamps the newest IR version the installed onnx knows (onnx 1.23 writes IR 14),
whatever the opset, and ONNX Runtime refuses a newer IR than it reads ("Unsupported model IR version: 14,
max supported IR version: 13" from ORT 1.31.1). The opset decides what the graph means; the lowest IR version
that can carry it (onnx.helper.VERSION_TABLE) is read by every ORT that runs that opset.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
from onnx import helper, numpy_helper

from ..errors import ConfigError, unreadable_onnx_file

# Opset 17 (onnx 1.12, IR 8): every operator our models use, and run by ORT >= 1.13.
OPSET = 17


def read_onnx_file(path: Path) -> onnx.ModelProto:
    """An ONNX file's model without its external weights (every reader here needs only the graph and the
    tables' shapes); ConfigError where it is missing or unreadable."""
    if not path.is_file():
        raise ConfigError(
            f"ONNX file {str(path)!r} does not exist (parameter onnx_file names it, relative to the "
            "version directory; default model.onnx)"
        )
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # the onnx package raises DecodeError and others for a damaged file
        raise unreadable_onnx_file(path, error) from error
    if not model.HasField("graph"):  # an empty file parses as an empty ModelProto
        raise unreadable_onnx_file(path, "it holds no graph (an empty file, or not an ONNX model)")
    return model


def initializer_arrays(path: Path) -> dict[str, Any]:
    """The main graph's initializers as numpy arrays, external weights included (the one reader that needs
    them: weights shared between sessions, runtime/session.py)."""
    model = read_onnx_file(path)  # its errors, then the weights
    onnx.load_external_data_for_model(model, str(path.parent))
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}


def subgraphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph of its nodes (If, Loop, Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from subgraphs(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from subgraphs(subgraph)


def ir_version_for(opset: int) -> int:
    """The lowest IR version that carries the default domain's `opset` (onnx.helper.VERSION_TABLE)."""
    return int(helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))


@functools.cache
def ort_max_ir_version() -> int:
    """The newest IR version the installed ONNX Runtime reads, from its own refusal of a newer one.

    ORT's Python API does not expose the number; its model loader names it in the error for a model of
    too new an IR (onnxruntime/core/graph/model.cc: "Unsupported model IR version: X, max supported IR
    version: Y")."""
    import onnxruntime as ort

    graph = helper.make_graph([], "ir_probe", [], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 1000
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:
        found = re.search(r"max supported IR version: (\d+)", str(error))
        if found:
            return int(found.group(1))
        raise RuntimeError(
            f"onnxruntime {ort.__version__} did not name its newest IR version: {error}"
        ) from error
    raise RuntimeError(f"onnxruntime {ort.__version__} loaded a model of IR version 1000")


def readable_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the IR version its opsets need, refused (naming the fix) if this ORT cannot read it."""
    model.ir_version = int(helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True))
    if model.ir_version > ort_max_ir_version():
        opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
        raise ValueError(
            f"opsets {opsets} need ONNX IR version {model.ir_version}, and this onnxruntime reads IR "
            f"<= {ort_max_ir_version()}. Fix: build the model with opset {OPSET} "
            "(triton_ort.model.onnx_files.OPSET), or install a newer onnxruntime"
        )
    return model


def save_model(graph: onnx.GraphProto | onnx.ModelProto, path: Path, opset: int = OPSET) -> Path:
    """Write `graph` (or a model, keeping its opsets) to `path`, checked and readable by this ORT."""
    if isinstance(graph, onnx.GraphProto):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    else:
        model = graph
    model = readable_model(model)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def model_bytes(graph: onnx.GraphProto, opset: int = OPSET) -> bytes:
    """`graph` as a serialised model, for an in-memory session, with the same versions as save_model."""
    model = readable_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())
