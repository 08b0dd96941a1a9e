"""Integer inputs get values their model accepts: ranges read from the graph's tables at auto-complete,
served as the parameter input_ranges, and followed (or overridden) by the clients that make up inputs."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support import graphs
from tests.support.python_backend import python_backend_utils
from triton_ort.cli.infer import _load_inputs, build_parser
from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.cli.request_data import (
    build_requests,
    generated,
    json_requests,
    parse_shape,
    read_json_input_data,
    shape_of,
)
from triton_ort.errors import ConfigError
from triton_ort.harness.transport import tensor_metas
from triton_ort.model.autocomplete import apply_completed, complete_config
from triton_ort.model.input_ranges import (
    DEFAULT_RANGE,
    ValueRange,
    describe,
    index_ranges,
    index_ranges_in_file,
    parse_ranges,
    value_ranges,
)

CONFIG: dict[str, Any] = {
    "name": "lookup",
    "max_batch_size": 8,
    "input": [
        {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "kind", "data_type": "TYPE_INT32", "dims": [1]},
        {"name": "mask", "data_type": "TYPE_INT64", "dims": [-1]},
    ],
    "parameters": {"input_ranges": {"string_value": "ids=0:49 kind=0:2"}},
}


def config(**fields: Any) -> dict[str, Any]:
    """A config as Triton hands a short config.pbtxt to auto_complete_config (empty lists)."""
    return {
        "name": "m",
        "backend": "onnxruntime_zerocopy",
        "input": [],
        "output": [],
        "parameters": {},
        **fields,
    }


METADATA: dict[str, Any] = {
    "inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "kind", "datatype": "INT32", "shape": [-1, 1]},
        {"name": "mask", "datatype": "INT64", "shape": [-1, -1]},
    ]
}


def test_inputs_that_index_a_table_get_its_rows_through_cast_and_squeeze(tmp_path: Path) -> None:
    ranges = index_ranges_in_file(graphs.embedding_lookup(tmp_path / "lookup.onnx"))
    assert {name: (r.low, r.high) for name, r in ranges.items()} == {"ids": (0, 49), "kind": (0, 2)}
    assert "50-row table of Gather 'word_lookup'" in ranges["ids"].why
    assert "mask" not in ranges  # multiplied in: no table bounds it


def test_the_smallest_table_wins_and_fused_embeddings_count() -> None:
    v = helper.make_tensor_value_info
    big = helper.make_tensor("big", TensorProto.FLOAT, [1000, 2], [0.0] * 2000)
    small = helper.make_tensor("small", TensorProto.FLOAT, [7, 2], [0.0] * 14)
    segments = helper.make_tensor("segments", TensorProto.FLOAT, [2, 2], [0.0] * 4)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["big", "ids"], ["a"]),
            helper.make_node("Identity", ["ids"], ["same"]),
            helper.make_node("Gather", ["small", "same"], ["b"]),
            helper.make_node(
                "EmbedLayerNormalization",
                ["words", "types", "big", "small", "segments"],
                ["c"],
                domain="com.microsoft",
            ),
        ],
        "g",
        [v(n, TensorProto.INT64, [1, 3]) for n in ("ids", "words", "types")],
        [v(n, TensorProto.FLOAT, None) for n in ("a", "b", "c")],
        initializer=[big, small, segments],
    )
    ranges = index_ranges(helper.make_model(graph))
    assert {name: r.high for name, r in ranges.items()} == {"ids": 6, "words": 999, "types": 1}


def test_auto_complete_reads_the_ranges_and_keeps_a_configs_own(tmp_path: Path) -> None:
    graphs.embedding_lookup(tmp_path / "model.onnx")
    written = config(name="lookup", max_batch_size=8)  # as Triton hands it to auto_complete_config
    completed = complete_config(written, tmp_path)
    assert completed.input_ranges == "ids=0:49 kind=0:2"
    pb_utils = python_backend_utils()
    triton_config = pb_utils.ModelConfig(json.dumps(written))
    apply_completed(triton_config, completed)
    sent = json.loads(json.dumps(triton_config._model_config))  # what the stub sends back (pb_stub.cc)
    assert "input_ranges" not in sent["parameters"]  # Triton would drop it (core UpdateModelConfig)
    own = config(max_batch_size=8, parameters={"input_ranges": {"string_value": "ids=0:9"}})
    assert complete_config(own, tmp_path).input_ranges is None


def test_a_model_without_tables_serves_no_parameter(tmp_path: Path) -> None:
    graphs.multi_io(tmp_path / "model.onnx")
    assert complete_config(config(max_batch_size=8), tmp_path).input_ranges is None


@pytest.mark.parametrize("text", ["ids", "ids=1", "ids=a:b", "ids=5:1", "=0:1"])
def test_a_range_that_cannot_be_read_is_refused_saying_the_form(text: str) -> None:
    with pytest.raises(ConfigError, match="is not NAME=LO:HI with numbers LO <= HI"):
        parse_ranges(text)


def test_a_clients_range_beats_the_served_one_which_beats_the_default() -> None:
    ranges = value_ranges(
        [("ids", "INT64"), ("kind", "INT32"), ("mask", "INT64"), ("x", "FP32")], CONFIG, {"kind": (1, 1)}
    )
    assert (ranges["ids"].low, ranges["ids"].high) == (0, 49) and "input_ranges" in ranges["ids"].why
    assert (ranges["kind"].low, ranges["kind"].high, ranges["kind"].why) == (1, 1, "--range")
    assert (ranges["mask"].low, ranges["mask"].high) == DEFAULT_RANGE and "x" not in ranges


def test_made_up_integers_stay_in_range_and_zero_means_zeros() -> None:
    rng = np.random.default_rng(0)
    values = generated("INT64", (64, 64), rng, "random", ValueRange(3, 5, "test"))
    assert values.min() == 3 and values.max() == 5 and values.dtype == np.int64
    assert not generated("FP32", (4, 4), rng, "zero", None).any()


@pytest.mark.parametrize("item", ["ids:16", "ids=16"])
def test_one_shape_syntax_for_both_commands(item: str) -> None:
    name, dims = parse_shape(item)
    assert (name, dims) == ("ids", (16,))
    assert shape_of(item, dims, (-1,), batched=True) == ((16,), None)  # without the batch axis
    assert shape_of("ids:4,16", (4, 16), (-1,), batched=True) == ((16,), 4)  # whole: sets the batch


def _infer_inputs(*args: str) -> dict[str, Any]:
    parsed = build_parser("triton-ort").parse_args(["infer", "lookup", *args])
    return _load_inputs(parsed, ModelSignature.from_config(CONFIG), METADATA, CONFIG)


def test_infer_follows_the_served_ranges_and_says_which_with_verbose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = _infer_inputs("--batch", "8", "--shape", "ids:32", "--shape", "mask:32", "--verbose")
    assert got["ids"].shape == (8, 32) and got["ids"].min() >= 0 and got["ids"].max() <= 49
    assert got["kind"].max() <= 2 and set(np.unique(got["mask"])) <= {0, 1}
    lines = capsys.readouterr().err.splitlines()
    assert "input 'ids': integers 0 to 49 (the served config's parameter input_ranges)" in lines
    # where no range is known, -v says where the model's ranges are and how to give them
    assert any(
        line.startswith("input 'mask': integers 0 to 1 (no input_ranges in the served config")
        and "triton-ort config" in line
        for line in lines
    )
    assert (_infer_inputs("--range", "ids=7:7")["ids"] == 7).all()
    assert not _infer_inputs("--input-data", "zero")["ids"].any()
    with pytest.raises(RequestError, match=r"--range idz=\.\.\.: the model has no input 'idz'"):
        _infer_inputs("--range", "idz=0:1")


def test_perf_follows_the_served_ranges() -> None:
    ranges = value_ranges([("ids", "INT64"), ("kind", "INT32"), ("mask", "INT64")], CONFIG, {})
    signature = ModelSignature.from_config(CONFIG)
    [inputs], batch = build_requests(signature, METADATA, 8, ["ids:64", "mask=64"], ranges=ranges)
    assert batch == 8 and inputs["ids"].max() <= 49 and inputs["kind"].max() <= 2
    assert inputs["mask"].shape == (8, 64)


def test_perf_analyzers_json_input_data_is_read_per_request(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "ids": {"content": [1, 2, 3, 4], "shape": [2, 2]},
                        "kind": [[0], [1]],
                        "mask": [[1, 1], [1, 0]],
                    },
                    {"ids": [[5, 6]], "kind": [[2]], "mask": [[1, 1]]},
                ]
            }
        )
    )
    requests, rows = read_json_input_data(path, METAS, batched=True)
    assert not rows and len(requests) == 2 and requests[0]["ids"].shape == (2, 2)
    assert requests[0]["kind"].dtype == np.int32
    first = _infer_inputs("--input-data", str(path))
    assert first["ids"].tolist() == [[1, 2], [3, 4]]
    path.write_text(json.dumps({"data": [{"idz": [1]}]}))
    with pytest.raises(RequestError, match="data\\[0\\] has 'idz', which is no input of the model"):
        read_json_input_data(path, METAS, batched=True)


def test_an_exported_graph_keeps_its_tables_readable(tmp_path: Path) -> None:
    """The ranges come from the tables' shapes only: a file saved with external data still gives them."""
    path = graphs.embedding_lookup(tmp_path / "lookup.onnx")
    model = onnx.load(str(path))
    onnx.save(model, str(tmp_path / "external.onnx"), save_as_external_data=True, size_threshold=0)
    assert index_ranges_in_file(tmp_path / "external.onnx")["ids"].high == 49


METAS = {meta.name: meta for meta in tensor_metas(METADATA, "inputs")}


def _json(tmp_path: Path, data: list[dict[str, Any]]) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"data": data}))
    return path


def test_perf_analyzers_own_forms_are_read_as_it_reads_them(tmp_path: Path) -> None:
    """perf_analyzer's JSON input data as it documents it: a "shape" without the batch axis, a plain list
    (the input's dims, its one open axis from the values), b64 content; the entries are rows, and a batch
    of -b takes consecutive ones, as perf_analyzer fills it. perf refused the first with "shape [16],
    expected [batch, any]"."""
    ids = np.arange(16, dtype=np.int64)
    b64 = {"b64": base64.b64encode(ids.tobytes()).decode()}
    path = _json(
        tmp_path,
        [
            {"ids": {"content": ids.tolist(), "shape": [16]}, "kind": [1], "mask": [1] * 16},
            {"ids": {"content": b64, "shape": [16]}, "kind": {"content": [2], "shape": [1]}, "mask": b64},
            {"ids": b64, "kind": [0], "mask": [0] * 16},
        ],
    )
    entries, rows = read_json_input_data(path, METAS, batched=True)
    assert rows and [e["ids"].shape for e in entries] == [(1, 16)] * 3
    assert all((e["ids"][0] == ids).all() for e in entries) and entries[1]["kind"].tolist() == [[2]]
    requests, rest = json_requests(path, METAS, True, ["ids:16"], batch=2)
    assert rest == [] and len(requests) == 2  # 3 rows make 2 batches of 2, the first row again last
    assert requests[0]["kind"].tolist() == [[1], [2]] and requests[1]["kind"].tolist() == [[0], [1]]
    signature = ModelSignature.from_config(CONFIG)
    built, batch = build_requests(signature, METADATA, 4, ["ids:16"], input_data=str(path))
    assert batch == 4 and built[0]["ids"].shape == (4, 16) and built[0]["mask"].dtype == np.int64
    assert _infer_inputs("--input-data", str(path), "--batch", "2")["kind"].tolist() == [[1], [2]]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"content": [1, 2, 3], "shape": [2, 2, 2]}, "shape [2, 2, 2], expected [any]"),
        ({"content": [1, 2, 3], "shape": [2]}, "3 values do not fill shape [2]"),
        ({"b64": "not base64!"}, "not base64"),
        ({"b64": "AAA="}, "2 b64 bytes are not whole INT64 values"),
        ({"shape": [3]}, "expected a list"),
    ],
)
def test_json_input_data_that_does_not_fit_is_one_line(tmp_path: Path, value: Any, words: str) -> None:
    path = _json(tmp_path, [{"ids": value}])
    with pytest.raises(RequestError, match=re.escape(words)):
        read_json_input_data(path, METAS, batched=True)


def test_a_float_input_takes_its_range_uniform_and_a_string_input_refuses_one() -> None:
    """--range on a float input was silently ignored; on a BYTES input it is refused by name."""
    ranges = value_ranges([("x", "FP32"), ("ids", "INT64")], CONFIG, {"x": (-0.5, 2.5)})
    assert (ranges["x"].low, ranges["x"].high) == (-0.5, 2.5) and "uniform" in ranges["x"].why
    values = generated("FP32", (256, 64), np.random.default_rng(0), "random", ranges["x"])
    assert values.dtype == np.float32 and values.min() >= -0.5 and values.max() <= 2.5 and values.std() > 0.5
    with pytest.raises(ConfigError, match=r"--range text=\.\.\.: input 'text' is BYTES"):
        value_ranges([("text", "BYTES")], CONFIG, {"text": (0, 1)})
    with pytest.raises(ConfigError, match="its ends must be integers"):
        value_ranges([("ids", "INT64")], CONFIG, {"ids": (0, 1.5)})


def test_tune_reads_the_ranges_from_the_model_folder_when_the_served_config_lacks_them(
    tmp_path: Path,
) -> None:
    """Triton does not serve what auto-complete adds to parameters, so the served config of a short
    config.pbtxt has no input_ranges; tune has the folder and reads them from the ONNX file."""
    from triton_ort.cli.tune import graph_ranges

    folder = tmp_path / "lookup"
    (folder / "1").mkdir(parents=True)
    graphs.embedding_lookup(folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n')
    graph = graph_ranges(folder)
    assert graph == {"ids": (0, 49), "kind": (0, 2)}
    served_without = {**CONFIG, "parameters": {}}
    ranges = value_ranges([("ids", "INT64"), ("mask", "INT64")], served_without, {}, graph)
    assert (ranges["ids"].low, ranges["ids"].high) == (0, 49) and "ONNX file" in ranges["ids"].why
    assert (ranges["mask"].low, ranges["mask"].high) == DEFAULT_RANGE


def test_verbose_says_why_an_integer_input_is_0_or_1_and_the_range_to_give() -> None:
    """Where no range is known, -v says why (the served config has none) and what to do: the --range."""
    ranges = value_ranges([("input_ids", "INT64")], {}, {})
    [line] = describe(ranges)
    assert line.startswith("input 'input_ids': integers 0 to 1 (no input_ranges in the served config")
    assert "give --range input_ids=0:" in line, line
    served = {"parameters": {"input_ranges": {"string_value": "input_ids=0:99"}}}
    assert "give --range" not in describe(value_ranges([("input_ids", "INT64")], served, {}))[0]
