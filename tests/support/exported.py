"""Models as people export them, built at test time from the exporters' pip packages (nothing committed
but this script): a scikit-learn pipeline through skl2onnx with ZipMap off, a BERT-style encoder from
transformers with a small random config (torch.onnx's TorchScript exporter, dynamic batch and sequence), and
an accumulator whose state travels with the client under Triton's sequence batcher. Small, so CI stays fast.
The second repository's models are in tests/support/exported_edge_cases.py.

Below them, what both repositories' tests share: writing a repository of such models (a host without an
exporter serves the others, and the missing ones' tests skip saying why), and asking the served models
over HTTP and gRPC at once, every answer against in-process ONNX Runtime.
"""

from __future__ import annotations

import importlib.util
import shutil
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from numpy.typing import NDArray
from onnx import TensorProto, helper

from tests.support import graphs
from tests.support.paths import SERVER_TOLERANCE
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import PROTOCOLS, infer, make_client, model_config
from triton_ort.model.onnx_files import save_model

FEATURES = 4
CLASSES = 3
VOCAB = 100


def sklearn_classifier(path: Path) -> Path:
    """StandardScaler + LogisticRegression on 4 features, 3 classes: X float[N, 4] -> label int64[N],
    probabilities float[N, 3] (skl2onnx leaves N unnamed)."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((90, FEATURES)).astype(np.float32)
    y = np.digitize(x[:, 0] + x[:, 1], [-0.5, 0.5])  # three classes
    pipeline = make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y)
    model = to_onnx(pipeline, x[:1], options={"zipmap": False}, target_opset=17)
    return save_model(model, path)  # the IR version its opsets need: readable by the ORT we run


def bert_encoder(path: Path, token_types: bool = False) -> Path:
    """transformers' BertModel, 1 layer of width 16, random weights: input_ids, attention_mask int64
    [batch, seq] (and token_type_ids, with `token_types`: a table of two rows, as BERT's) ->
    last_hidden_state [batch, seq, 16], pooler_output [batch, 16]."""
    import torch
    import transformers

    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    bert = transformers.BertModel(config)
    bert.train(False)  # inference: no dropout

    class Encoder(torch.nn.Module):
        """Keyword arguments only: transformers 5's forward has more positional ones than an export passes."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *types: torch.Tensor) -> Any:
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=types[0] if types else None
            )
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, VOCAB, (2, 7))
    axes = {0: "batch", 1: "sequence"}
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if token_types else [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notices
        torch.onnx.export(
            Encoder(),
            (ids, torch.ones_like(ids), *([torch.zeros_like(ids)] if token_types else [])),
            str(path),
            input_names=names,
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={
                **{name: axes for name in names},
                "last_hidden_state": axes,
                "pooler_output": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    return save_model(onnx.load(str(path)), path)


def accumulator(path: Path) -> Path:
    """total = (START ? 0 : state) + x, the running sum of a sequence whose state the client sends back;
    the sequence batcher's START, END, CORRID and READY come in as inputs, and the last three are echoed so
    a test sees which sequence and step each answer was computed for. All [batch, 1]."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["START"], ["starts"], to=TensorProto.BOOL),
            helper.make_node("Where", ["starts", "zero", "state"], ["carried"]),
            helper.make_node("Add", ["carried", "x"], ["total"]),
            helper.make_node("Identity", ["END"], ["ended"]),
            helper.make_node("Identity", ["CORRID"], ["sequence"]),
            helper.make_node("Identity", ["READY"], ["ready"]),
        ],
        "accumulator",
        [
            v("x", TensorProto.FLOAT, ["batch", 1]),
            v("state", TensorProto.FLOAT, ["batch", 1]),
            v("START", TensorProto.INT32, ["batch", 1]),
            v("END", TensorProto.INT32, ["batch", 1]),
            v("CORRID", TensorProto.UINT64, ["batch", 1]),
            v("READY", TensorProto.INT32, ["batch", 1]),
        ],
        [
            v("total", TensorProto.FLOAT, ["batch", 1]),
            v("ended", TensorProto.INT32, ["batch", 1]),
            v("sequence", TensorProto.UINT64, ["batch", 1]),
            v("ready", TensorProto.INT32, ["batch", 1]),
        ],
        initializer=[helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])],
    )
    return graphs.save(graph, path)


SEQUENCE_CONFIG = """
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
    { name: "END", control [ { kind: CONTROL_SEQUENCE_END, int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 } ] },
    { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY, int32_false_true: [ 0, 1 ] } ] }
  ]
}
"""
"""What the accumulator's config.pbtxt adds to the two lines: the control inputs, mapped to model inputs."""


TWO_LINES = 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n'
"""The config a user writes for an exported model (auto-complete fills in the rest)."""
CONCURRENCY = 8


@dataclass(frozen=True)
class Exported:
    """A model of an exported-models repository: how its ONNX file is built, and its config.pbtxt."""

    build: Callable[[Path], Path]
    config: str = TWO_LINES
    needs: tuple[str, ...] = ()
    """The pip packages its exporter needs (requirements-dev.txt). A host without one of them (the GPU test
    host has no index), or with one that cannot build the model (that host's transformers cannot import
    BertModel), serves the other models, and this one's tests skip, saying why."""


@dataclass(frozen=True)
class Served:
    """A running server of an exported-models repository: the ONNX files it serves, by model name, and
    why each model that is not served is missing."""

    server: LocalTritonServer
    files: Mapping[str, Path]
    missing: Mapping[str, str]

    def onnx_file(self, model: str) -> Path:
        """The model's ONNX file; skips the test when the model could not be built here."""
        if model not in self.files:
            pytest.skip(f"{model}: {self.missing.get(model, 'not built')}")
        return self.files[model]

    def url(self, protocol: str) -> str:
        return self.server.http_url if protocol == "http" else self.server.grpc_url


def write_repository(
    repository: Path, models: Mapping[str, Exported]
) -> tuple[dict[str, Path], dict[str, str]]:
    """Each model built (its ONNX file beside the repository, for the reference) and copied into
    `repository`: the files by name, and why each model that could not be built is missing."""
    files: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for name, model in models.items():
        absent = [package for package in model.needs if importlib.util.find_spec(package) is None]
        if absent:
            missing[name] = f"{', '.join(absent)} not installed here (requirements-dev.txt)"
            continue
        try:
            onnx_path = model.build(repository.parent / "onnx" / f"{name}.onnx")
        except ImportError as error:
            if not model.needs:
                raise
            first_line = str(error).splitlines()[0]
            missing[name] = f"{', '.join(model.needs)} installed but could not export: {first_line}"
            continue
        version = repository / name / "1"
        version.mkdir(parents=True)
        shutil.copy(onnx_path, version / "model.onnx")
        (repository / name / "config.pbtxt").write_text(model.config)
        files[name] = onnx_path
    return files, missing


def concurrently(calls: list[Callable[[], None]], workers: int = CONCURRENCY) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def check_answers(
    served: Served,
    model: str,
    requests: list[dict[str, NDArray[Any]]],
    compare: Callable[[str, NDArray[Any], NDArray[Any]], None],
    workers: int = CONCURRENCY,
) -> None:
    """Every request over both protocols at once, each answer against the same request alone through
    in-process ORT on the CPU."""
    onnx_path = served.onnx_file(model)
    names = [
        str(entry["name"]) for entry in model_config(make_client("http", served.url("http")), model)["output"]
    ]

    def one(protocol: str, inputs: dict[str, NDArray[Any]]) -> None:
        got, _ = infer(make_client(protocol, served.url(protocol)), model, inputs, names)
        want = reference_outputs(onnx_path, inputs)
        for name in names:
            compare(name, got[name], want[name])

    concurrently([partial(one, p, r) for p in PROTOCOLS for r in requests], workers)


def close(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
    """Same type, and the values within what the server's device allows (tests/support/paths.py)."""
    assert got.dtype == want.dtype, name
    np.testing.assert_allclose(got, want, err_msg=name, **SERVER_TOLERANCE)
