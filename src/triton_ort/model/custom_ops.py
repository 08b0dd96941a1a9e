"""Custom operators: nodes of a domain that ONNX Runtime does not implement, and the libraries that
register them (config.pbtxt's `model_operations { op_library_filename: [...] }`, as the native onnxruntime
backend reads it).

The native backend hands each op_library_filename to ONNX Runtime unchanged before it creates the session
(onnxruntime_backend src/onnxruntime.cc ModelState::LoadModel, "Register all op libraries that contain
custom operations": RegisterCustomOpsLibrary(soptions, op_filename.c_str(), ...)); ONNX Runtime opens it
with dlopen, so an absolute path is the file itself, a bare file name is searched on the dynamic loader's
path (LD_LIBRARY_PATH, the system's directories), and a relative path with a `/` is relative to the
server's working directory. The same here (session.py).

Without a library, a node of a domain that ONNX Runtime does not know fails ORT's session with its own
words (`com.example:MyFancyOp(-1) is not a registered function/op`); the load and `triton-ort config`
(offline, without ONNX Runtime) say instead which node, which domain, and the config line that registers
a library. Importing this module imports no ONNX Runtime.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import onnx

from ..errors import ConfigError
from .onnx_files import read_onnx_file, subgraphs

ORT_DOMAINS = frozenset(
    {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"}
)
"""The operator domains ONNX Runtime implements (its schema registry: get_all_operator_schema(), with
"ai.onnx", ONNX's own name for ""): tests/unit/test_custom_ops.py holds the list to the installed ORT."""
TENSORRT_DOMAIN = "trt.plugins"
"""The domain the TensorRT execution provider registers for TensorRT's plugins
(tensorrt_execution_provider_custom_ops.cc, CreateTensorRTCustomOpDomainList)."""

_ORT_UNREGISTERED = re.compile(
    r"(?P<domain>[\w.\-]*):(?P<op_type>[\w.\-]+)\(-?\d+\) is not a registered function/op"
)


def config_line(path: str = "/path/to/libcustom_ops.so") -> str:
    return f'model_operations {{ op_library_filename: "{path}" }}'


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and those of its subgraphs (If, Loop, Scan bodies)."""
    for each in subgraphs(graph):
        yield from each.node


def _read(onnx_path: Path) -> onnx.ModelProto | None:
    try:
        return read_onnx_file(onnx_path)
    except ConfigError:  # unreadable: the load's other checks say so
        return None


def unregistered_node_message(node: onnx.NodeProto, index: int | None, libraries: Sequence[str]) -> str:
    """The one line for a node whose operator no one registers (`index` None: not found in the graph)."""
    named = f"node {node.name!r}" if node.name else f"node #{index} (unnamed)"
    if index is None:
        named = "a node"
    where = f"{named} (op type {node.op_type!r}) is of domain {node.domain!r}"
    if libraries:
        return (
            f"{where}, which neither ONNX Runtime nor the libraries in model_operations "
            f"({', '.join(repr(lib) for lib in libraries)}) register: check that one of them implements "
            f"{node.domain}:{node.op_type}"
        )
    return (
        f"{where}, which ONNX Runtime does not implement: register the custom-op library that does in "
        f"config.pbtxt: {config_line()}"
    )


def check_op_libraries(libraries: Sequence[str]) -> None:
    """An op library given by an absolute path must be a file there (a bare name or a relative path is
    found by the dynamic loader where the server runs: ONNX Runtime says at load whether it is)."""
    for library in libraries:
        if Path(library).is_absolute() and not Path(library).is_file():
            raise ConfigError(
                f"model_operations op_library_filename {library!r} does not exist (the custom-op library "
                "is loaded from that path as it is written)"
            )


def check_custom_operators(onnx_path: Path, libraries: Sequence[str], tensorrt: bool = False) -> None:
    """Refuse a graph with a node of a domain that ONNX Runtime does not know (nor the model's own
    functions, nor TensorRT's plugins where the TensorRT accelerator is configured) when the config names
    no op library; with libraries, what they register is known only to ONNX Runtime at load."""
    if libraries:
        return
    model = _read(onnx_path)
    if model is None:
        return
    known = ORT_DOMAINS | {function.domain for function in model.functions}
    if tensorrt:
        known |= {TENSORRT_DOMAIN}
    for index, node in enumerate(_nodes(model.graph)):
        if node.domain not in known:
            raise ConfigError(unregistered_node_message(node, index, libraries))


def unregistered_operator_error(
    onnx_path: Path, libraries: Sequence[str], ort_message: str
) -> ConfigError | None:
    """ONNX Runtime's refusal of an operator no one registers (`domain:Op(version) is not a registered
    function/op`) as the one line that names the node; None for any other error."""
    found = _ORT_UNREGISTERED.search(ort_message)
    if found is None:
        return None
    model = _read(onnx_path)
    nodes = enumerate(_nodes(model.graph)) if model is not None else iter(())
    for index, node in nodes:
        if (node.domain, node.op_type) == (found["domain"], found["op_type"]) or (
            found["domain"] == "ai.onnx" and node.domain == "" and node.op_type == found["op_type"]
        ):
            return ConfigError(unregistered_node_message(node, index, libraries))
    node = onnx.helper.make_node(found["op_type"], [], [], domain=found["domain"])
    return ConfigError(unregistered_node_message(node, None, libraries))
