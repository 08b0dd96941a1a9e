"""Model repositories for the server tests: the demo plus small test models, each served by the same
generic model.py, written into a temporary directory."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from onnx import TensorProto, helper

from tests import graphs
from tests.paths import DEMO_MODEL_PY, MODEL_REPOSITORY, demo_onnx, pin_one_instance


def gather_elements(path: Path) -> Path:
    """out[b,1] = x[b, idx[b]]: an index out of range fails inside ORT, for that request's values only."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "idx"], ["out"], axis=1)],
        "gather_elements",
        [v("x", TensorProto.FLOAT, ["batch", 4]), v("idx", TensorProto.INT64, ["batch", 1])],
        [v("out", TensorProto.FLOAT, ["batch", 1])],
    )
    return graphs._save(graph, path)


def _tensor(name: str, data_type: str, dims: list[int]) -> str:
    return f'{{ name: "{name}", data_type: TYPE_{data_type}, dims: {dims} }}'


def _config(
    name: str,
    inputs: list[str],
    outputs: list[str],
    max_batch_size: int = 64,
    queue_delay_us: int = 100,
    kind: str = "KIND_AUTO",
) -> str:
    return f"""name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {", ".join(inputs)} ]
output [ {", ".join(outputs)} ]
instance_group [ {{ kind: {kind}, count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}
parameters [ {{ key: "FORCE_CPU_ONLY_INPUT_TENSORS", value: {{ string_value: "no" }} }} ]
"""


def add_model(repository: Path, name: str, build: Callable[[Path], Path], config: str) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True)
    build(version / "model.onnx")
    shutil.copy(DEMO_MODEL_PY, version / "model.py")
    (repository / name / "config.pbtxt").write_text(config)


def build_test_repository(repository: Path) -> Path:
    shutil.copytree(MODEL_REPOSITORY / "demo", repository / "demo")
    pin_one_instance(repository / "demo")
    shutil.copy(demo_onnx(), repository / "demo" / "1" / "model.onnx")
    add_model(
        repository,
        "multi_io",
        graphs.multi_io,
        _config(
            "multi_io",
            [_tensor("a", "FP16", [3]), _tensor("b", "INT64", [4]), _tensor("c", "BOOL", [2])],
            [_tensor("a_twice", "FP16", [3]), _tensor("b_sum", "INT64", [1]), _tensor("c_not", "BOOL", [2])],
        ),
    )
    # A long queue delay so that concurrent requests reach one execute() together. On the CPU everywhere:
    # ORT's CUDA GatherElements does not bounds-check its indices (an out-of-range index returns garbage
    # instead of failing), and this model exists to fail one request of a batch.
    add_model(
        repository,
        "gather",
        gather_elements,
        _config(
            "gather",
            [_tensor("x", "FP32", [4]), _tensor("idx", "INT64", [1])],
            [_tensor("out", "FP32", [1])],
            queue_delay_us=200_000,
            kind="KIND_CPU",
        ),
    )
    return repository


def build_mismatch_repository(repository: Path) -> Path:
    """A demo whose config.pbtxt disagrees with its ONNX file (dtype and inner dimension)."""
    add_model(
        repository,
        "mismatch",
        lambda path: Path(shutil.copy(demo_onnx(), path)),
        _config(
            "mismatch",
            [_tensor("np_script_embeddings", "FP32", [2000])],
            [_tensor("np_logits", "FP16", [2])],
        ),
    )
    return repository
