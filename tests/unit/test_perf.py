"""`triton-ort perf`'s parts without a server: the answer check (a wrong shape, datatype or byte count is
caught), the inputs built from a model's metadata (open axes, optional and string inputs) and written as
perf_analyzer's JSON input data, perf_analyzer's command and its CSV read back as a point, the one line
without perf_analyzer, the arguments, the native twin's skip lines, and the reports."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from triton_ort.cli import perf, perf_analyzer
from triton_ort.cli.perf_plot import nice_ticks, svg_plot
from triton_ort.cli.request_checks import (
    ModelSignature,
    OutputSpec,
    RequestError,
    SeenOutput,
    check_answer,
    expected_outputs,
    seen_outputs,
)
from triton_ort.cli.request_data import build_requests, read_json_input_data
from triton_ort.harness.transport import STAGES, tensor_metas

EXPECTED = [
    OutputSpec("y", "FP32", (2, 4)),
    OutputSpec("ids", "INT64", (2, -1)),
    OutputSpec("t", "BYTES", (2,)),
]


def answer(**changes: SeenOutput) -> dict[str, SeenOutput]:
    outputs = {
        "y": SeenOutput("FP32", (2, 4), 32),
        "ids": SeenOutput("INT64", (2, 7), 112),
        "t": SeenOutput("BYTES", (2,), 21),
    }
    return {**outputs, **changes}


def test_a_right_answer_passes_whatever_its_open_axes_hold() -> None:
    assert check_answer(EXPECTED, answer()) == []
    assert check_answer(EXPECTED, answer(ids=SeenOutput("INT64", (2, 0), 0))) == []
    assert check_answer(EXPECTED, answer(y=SeenOutput("FP32", (2, 4), None))) == []  # in shared memory


@pytest.mark.parametrize(
    ("changed", "words"),
    [
        ({"y": SeenOutput("FP32", (3, 4), 48)}, "output 'y': shape [3, 4], expected [2, 4]"),
        ({"y": SeenOutput("FP32", (2, 4, 1), 32)}, "output 'y': shape [2, 4, 1], expected [2, 4]"),
        ({"ids": SeenOutput("INT64", (2,), 16)}, "output 'ids': shape [2], expected [2, any]"),
        ({"y": SeenOutput("FP16", (2, 4), 16)}, "output 'y': datatype FP16, expected FP32"),
        ({"y": SeenOutput("FP32", (2, 4), 31)}, "output 'y': 31 bytes for shape [2, 4], expected 32"),
        ({"extra": SeenOutput("FP32", (1,), 4)}, "output 'extra': not an output of the model"),
    ],
)
def test_a_wrong_answer_is_named(changed: dict[str, SeenOutput], words: str) -> None:
    assert check_answer(EXPECTED, answer(**changed)) == [words]


def test_a_missing_output_is_named() -> None:
    seen = answer()
    del seen["t"]
    assert check_answer(EXPECTED, seen) == ["output 't' missing"]


def test_the_outputs_an_answer_declares_over_http_and_grpc() -> None:
    class HttpResult:
        def get_response(self) -> dict[str, Any]:
            outputs = [
                {"name": "y", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}
            ]
            return {"outputs": outputs}

    assert seen_outputs(HttpResult()) == {"y": SeenOutput("FP32", (2, 4), 32)}
    response = service_pb2.ModelInferResponse()
    response.outputs.add(name="y", datatype="FP32", shape=[2, 4])
    response.raw_output_contents.append(b"\0" * 30)

    class GrpcResult:
        def get_response(self) -> service_pb2.ModelInferResponse:
            return response

    seen = seen_outputs(GrpcResult())
    assert seen == {"y": SeenOutput("FP32", (2, 4), 30)}
    assert check_answer([OutputSpec("y", "FP32", (2, 4))], seen) == [
        "output 'y': 30 bytes for shape [2, 4], expected 32"
    ]


def test_an_output_in_shared_memory_is_checked_by_datatype_and_shape_over_grpc() -> None:
    # Triton's gRPC endpoint answers an output written into a shared-memory region with empty contents
    # and no parameter that says so: what was asked decides
    response = service_pb2.ModelInferResponse()
    response.outputs.add(name="y", datatype="FP32", shape=[2, 4])
    response.raw_output_contents.append(b"")

    class GrpcResult:
        def get_response(self) -> service_pb2.ModelInferResponse:
            return response

    assert check_answer([OutputSpec("y", "FP32", (2, 4))], seen_outputs(GrpcResult())) == [
        "output 'y': 0 bytes for shape [2, 4], expected 32"
    ]
    seen = seen_outputs(GrpcResult(), in_shared_memory=True)
    assert seen == {"y": SeenOutput("FP32", (2, 4), None)}
    assert check_answer([OutputSpec("y", "FP32", (2, 4))], seen) == []


META = {
    "inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "mask", "datatype": "INT64", "shape": [-1, 16]},
        {"name": "text", "datatype": "BYTES", "shape": [-1, 1]},
        {"name": "scale", "datatype": "FP32", "shape": [-1, 1]},
    ],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}
CONFIG = {
    "name": "bert",
    "max_batch_size": 8,
    "input": [
        {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "mask", "data_type": "TYPE_INT64", "dims": [16]},
        {"name": "text", "data_type": "TYPE_STRING", "dims": [1]},
        {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
    ],
}
SIGNATURE = ModelSignature.from_config(CONFIG)


def test_inputs_from_the_metadata_with_open_axes_sized_strings_and_optional_ones_left_out() -> None:
    [inputs], batch = build_requests(SIGNATURE, META, 4, ["ids:128"], string_data="hello")
    assert batch == 4 and sorted(inputs) == ["ids", "mask", "text"]
    assert inputs["ids"].shape == (4, 128) and inputs["ids"].dtype == np.int64
    assert inputs["mask"].shape == (4, 16)
    assert inputs["text"].shape == (4, 1) and inputs["text"][0, 0] == b"hello"
    [with_scale], _ = build_requests(SIGNATURE, META, None, ["ids:3", "scale:1"])
    assert with_scale["scale"].shape == (1, 1) and with_scale["text"].dtype == object


def test_inputs_from_an_npz_set_the_batch(tmp_path: Path) -> None:
    np.savez(tmp_path / "real.npz", ids=np.ones((2, 5), np.int64), text=np.array([["a"], ["b"]]))
    [inputs], batch = build_requests(SIGNATURE, META, None, npz=tmp_path / "real.npz")
    assert batch == 2 and inputs["ids"].shape == (2, 5) and inputs["mask"].shape == (2, 16)
    assert inputs["text"][1, 0] == b"b"  # unicode from np.savez, sent as UTF-8 bytes
    with pytest.raises(RequestError, match=r"-b 3 with --inputs .*batch .* is 2; leave -b out"):
        build_requests(SIGNATURE, META, 3, npz=tmp_path / "real.npz")


@pytest.mark.parametrize(
    ("batch", "shapes", "words"),
    [
        (1, [], r"open axes without a size: input 'ids' \[any\] .*--shape ids:16, .*--inputs FILE.npz"),
        (1, ["ids:4,4,4"], r"--shape ids:4,4,4: expected 1 dims \(or 2 with the batch axis first\)"),
        (1, ["ids:4,4"], r"--shape ids:4,4: its batch 4 is not the batch -b gives, 1"),
        (1, ["ids:4", "mask:15"], r"--shape mask:15: the input's dims are \[16\]"),
        (1, ["ids:4", "masks:16"], "model 'bert' has no input 'masks'; expected one of ids, mask, text"),
        (1, ["ids"], "--shape 'ids': expected NAME:D1,D2,..."),
        (1, ["ids:0"], "--shape 'ids:0': expected NAME:D1,D2,..."),
        (9, ["ids:4"], "-b 9: expected 1 to 8"),
    ],
)
def test_inputs_that_cannot_be_built_are_one_clear_error(batch: int, shapes: list[str], words: str) -> None:
    with pytest.raises(RequestError, match=words):
        build_requests(SIGNATURE, META, batch, shapes)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "no model"),
        (["a", "-m", "b"], "two models"),
        (["m", "--plot", "p.png"], "name it with .svg"),
        (["m", "--concurrency", "0"], "expected 1 or more"),
        (["m", "--concurrency", "2", "--concurrency-range", "1:2"], "not allowed with"),
        (["m", "-u", "http://h:1"], "without the scheme"),
    ],
)
def test_bad_arguments_are_refused_before_connecting(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        perf.main(argv)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and words in error, error


class Index:
    """A client's repository index and load_model, as a server with or without the native backend has
    them."""

    def __init__(self, entry: dict[str, str] | None, load_error: str = "") -> None:
        self.entries = [{"name": "m", "state": "READY"}] + ([entry] if entry else [])
        self.load_error = load_error
        self.loaded: list[str] = []

    def get_model_repository_index(self) -> list[dict[str, str]]:
        return self.entries

    def load_model(self, name: str) -> None:
        if self.load_error:
            self.entries[-1] = {"name": name, "state": "UNAVAILABLE", "reason": self.load_error}
            raise InferenceServerException("failed to load")
        self.loaded.append(name)


MISSING = "unable to find 'libtriton_onnxruntime.so' or 'onnxruntime/model.py' for model 'm_native'"


def test_the_native_twin_is_measured_loaded_or_skipped_with_one_line() -> None:
    assert perf.native_twin(Index({"name": "m_native", "state": "READY"}), "m_native") == (True, False, "")
    unloaded = Index({"name": "m_native"})
    assert perf.native_twin(unloaded, "m_native") == (True, True, "") and unloaded.loaded == ["m_native"]
    ready, loaded, why = perf.native_twin(Index({"name": "m_native"}, MISSING), "m_native")
    assert (
        not ready
        and not loaded
        and why.startswith("native onnxruntime backend: not installed on this server")
    )
    assert MISSING in why
    failed = {"name": "m_native", "state": "UNAVAILABLE", "reason": MISSING}
    assert "not installed" in perf.native_twin(Index(failed), "m_native")[2]
    absent = perf.native_twin(Index(None), "m_native")[2]
    assert "the server has no model 'm_native'" in absent and 'backend: "onnxruntime"' in absent


def point(model: str, concurrency: int, rate: float, p50_ms: float) -> perf_analyzer.Point:
    return perf_analyzer.Point(
        model, concurrency, 1, 100, rate, p50_ms * 1e3, p50_ms * 1e3, p50_ms * 1.2e3,
        p50_ms * 1.3e3, p50_ms * 2e3, True, dict.fromkeys(STAGES, 5.0),
    )  # fmt: skip


def test_ratios_csv_and_plot(tmp_path: Path) -> None:
    points = [point("m", 1, 100.0, 10.0), point("m_native", 1, 200.0, 4.0), point("m", 4, 300.0, 12.0)]
    assert perf.ratios(points, "m", "m_native") == [
        "native onnxruntime / m at c=1: p50 0.40x, throughput 2.00x"
    ]
    args = argparse.Namespace(json=None, csv=tmp_path / "p.csv", plot=None)
    perf.write_reports(args, {"batch": 1}, points)
    rows = list(csv.DictReader(io.StringIO(args.csv.read_text())))
    assert [row["model"] for row in rows] == ["m", "m_native", "m"] and rows[0]["server_queue_us"] == "5.0"
    svg = svg_plot(points, "m: latency against throughput")
    root = ElementTree.fromstring(svg)
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2
    assert "c=4" in svg and "m_native" in svg
    assert "native onnxruntime" not in perf.table(points) and perf.table(points).count("\n") == 4


@pytest.mark.parametrize(("percentile", "columns"), [(95, ["p95 ms"]), (97.5, ["p95 ms", "p97.5 ms"])])
def test_a_percentile_that_has_its_column_is_not_printed_twice(percentile: float, columns: list[str]) -> None:
    judged = dataclasses.replace(point("m", 1, 100.0, 10.0), percentile=percentile)
    header = perf.table([judged]).splitlines()[0]
    assert [c for c in ("p95 ms", "p97.5 ms") if c in header] == columns and header.count("p95 ms") == 1


def test_plot_ticks_are_round_and_cover_the_data() -> None:
    assert nice_ticks(9.3) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert nice_ticks(1234.0)[-1] >= 1234.0
    assert nice_ticks(0.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_the_plots_axes_start_where_the_data_does() -> None:
    """Points at 5,000-5,400 infer/s and 3-4 ms: an axis from 0 would put them all at its right edge."""
    assert nice_ticks(5400.0, bottom=5000.0) == [5000.0, 5100.0, 5200.0, 5300.0, 5400.0]
    points = [point("m", 1, 5000.0, 3.0), point("m", 16, 5400.0, 4.0)]
    root = ElementTree.fromstring(svg_plot(points, "m"))
    dots = [float(c.get("cx", 0)) for c in root.iter("{http://www.w3.org/2000/svg}circle")]
    left, right = 80, 720 - 160  # the plot area (perf_plot.LEFT, WIDTH - RIGHT)
    assert min(dots) < left + 0.2 * (right - left) and max(dots) > right - 0.2 * (right - left), dots


def test_a_model_without_a_batch_axis_takes_its_whole_shape() -> None:
    metadata = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2010]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
    }
    config = {
        "name": "m",
        "max_batch_size": 0,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 2010]}],
    }
    signature = ModelSignature.from_config(config)
    [inputs], batch = build_requests(signature, metadata, None, ["x:3,2010"])
    assert batch == 1 and inputs["x"].shape == (3, 2010)
    assert expected_outputs(metadata, batch, batched=False) == [OutputSpec("y", "FP32", (-1, 2))]
    with pytest.raises(RequestError, match="open axes without a size: input 'x' "):
        build_requests(signature, metadata, None)
    with pytest.raises(RequestError, match="takes no batch axis"):
        build_requests(signature, metadata, 4, ["x:3,2010"])


def test_load_ranges_are_perf_analyzers() -> None:
    assert perf_analyzer.load_range(int, 1)("1:4") == [1, 2, 3, 4]
    assert perf_analyzer.load_range(int, 1)("1:16:5") == [1, 6, 11, 16]
    assert perf_analyzer.load_range(float, 0)("10:30") == [10.0, 30.0]
    for text in ("0:4", "4:1", "1", "1:4:0", "a:b"):
        with pytest.raises(argparse.ArgumentTypeError, match="START:END"):
            perf_analyzer.load_range(int, 1)(text)


# perf_analyzer 2.41's -f CSV with --verbose-csv and --collect-metrics, as it wrote it for the demo here
CSV = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
    "Avg latency,request/response,response wait,Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,"
    "Total GPU Memory\n1,4292.7,4,201,50,16,530,125,1,793,1013,1201,4943,929,5,914,,,,\n"
)


def test_a_point_is_perf_analyzers_csv_row() -> None:
    row = perf_analyzer.read_csv_row(CSV)
    got = perf_analyzer.point_from_csv(row, "demo", 4, 3868, percentile=95.0, concurrency=1)
    assert (got.concurrency, got.batch, got.requests, got.infer_per_s) == (1, 4, 3868, 4292.7)
    assert (got.p50_us, got.p99_us, got.avg_us, got.latency_us) == (793, 4943, 929, 1201)
    assert got.server_us == {"queue": 50, "compute_input": 16, "compute_infer": 530, "compute_output": 125}
    assert got.gpu_utilization is None and got.load == "c=1"
    rated = perf_analyzer.point_from_csv(row, "demo", 4, 10, request_rate=250.0)
    assert rated.load == "r=250" and rated.latency_us == 929
    assert perf_analyzer.read_csv_row("") == {}
    assert perf_analyzer.request_count("  Client:\n    Request count: 3868\n") == 3868


def test_gpu_metrics_are_read_as_perf_analyzer_writes_them_one_value_per_gpu() -> None:
    """perf_analyzer's report writer puts `<gpu uuid>:<value>;` per GPU in each GPU column (its
    report_writer_test.cc): on a GPU host `float()` of that failed and perf reported no GPU figures."""
    row = {
        **perf_analyzer.read_csv_row(CSV),
        "Avg GPU Utilization": "GPU-8b1c:0.25;GPU-77aa:0.5;",
        "Max GPU Memory Usage": "GPU-8b1c:1048576;GPU-77aa:2097152;",
    }
    got = perf_analyzer.point_from_csv(row, "demo", 4, 10, concurrency=1)
    assert got.gpu_utilization == 0.5 and got.gpu_memory_mib == 3.0


def test_the_requests_are_perf_analyzers_json_input_data_row_by_row(tmp_path: Path) -> None:
    """perf writes its requests as perf_analyzer's JSON (one entry a row, exact bytes); read back as
    perf_analyzer reads it, they are the same requests."""
    requests, batch = build_requests(SIGNATURE, META, 3, ["ids:5"], string_data="hi")
    path = tmp_path / "data.json"
    path.write_text(json.dumps(perf_analyzer.input_data(requests, batched=True)))
    metas = {meta.name: meta for meta in tensor_metas(META, "inputs")}
    entries, rows = read_json_input_data(path, metas, batched=True)
    assert rows and len(entries) == batch == 3
    for name, array in requests[0].items():
        assert (np.concatenate([entry[name] for entry in entries]) == array).all(), name


def test_perf_analyzers_command_carries_perfs_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(perf_analyzer, "find_perf_analyzer", lambda: ("/bin/pa", ""))
    args = perf.build_parser("perf").parse_args(
        [
            *("m", "-u", "h:1", "-i", "grpc", "-p", "500", "-s", "5", "--max-trials", "4"),
            *("--percentile", "95", "--shared-memory", "system", "--metrics-url", "h:2"),
        ]
    )
    args.request_rate = None
    target = perf_analyzer.Target("m", [OutputSpec("y", "FP32", (8, 4))])
    command = perf_analyzer.perf_analyzer_command(args, target, 8, 4, tmp_path / "d.json", tmp_path / "o.csv")
    text = " ".join(command)
    assert text.startswith("/bin/pa -m m -u h:1 -i grpc -b 8 --input-data")
    for part in ("--concurrency-range 4:4", "-p 500 -s 5 --max-trials 4", "--percentile 95"):
        assert part in text, text
    assert "--shared-memory system --output-shared-memory-size 2048" in text
    assert "--collect-metrics --metrics-url http://h:2/metrics" in text
    args.request_rate, args.distribution = [100.0], "poisson"
    text = " ".join(
        perf_analyzer.perf_analyzer_command(args, target, 8, 100.0, tmp_path / "d", tmp_path / "o")
    )
    assert "--request-rate-range 100:100 --request-distribution poisson" in text


def test_without_perf_analyzer_perf_is_one_line_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TRITON_ORT_PERF_ANALYZER", raising=False)  # as the GPU host's run sets it
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    broken = tmp_path / "perf_analyzer"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libb64.so.0d' >&2; exit 127\n")
    broken.chmod(0o755)
    perf_analyzer.find_perf_analyzer.cache_clear()
    try:
        path, why = perf_analyzer.find_perf_analyzer()
        assert path is None and "libb64.so.0d" in why and "make perf-analyzer" in why
        with pytest.raises(SystemExit) as stopped:
            perf.main(["m"])
    finally:
        perf_analyzer.find_perf_analyzer.cache_clear()
    assert stopped.value.code == 1
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "Fix: make perf-analyzer" in error
