"""`triton-ort perf`'s parts without a server: the answer check (a wrong shape, datatype or byte count is
caught), the stability rule on synthetic windows, a point's figures from its windows, the inputs built
from a model's metadata (open axes, optional and string inputs), the arguments, the native twin's skip
lines, and the reports."""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import io
import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from triton_ort.cli import perf
from triton_ort.cli.perf import OutputSpec, SeenOutput, Window, check_answer, stable
from triton_ort.cli.perf_plot import nice_ticks, svg_plot
from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.harness.transport import STAGES, ModelStatistics

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

    assert perf.seen_outputs(HttpResult()) == {"y": SeenOutput("FP32", (2, 4), 32)}
    response = service_pb2.ModelInferResponse()
    response.outputs.add(name="y", datatype="FP32", shape=[2, 4])
    response.raw_output_contents.append(b"\0" * 30)

    class GrpcResult:
        def get_response(self) -> service_pb2.ModelInferResponse:
            return response

    seen = perf.seen_outputs(GrpcResult())
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

    assert check_answer([OutputSpec("y", "FP32", (2, 4))], perf.seen_outputs(GrpcResult())) == [
        "output 'y': 0 bytes for shape [2, 4], expected 32"
    ]
    seen = perf.seen_outputs(GrpcResult(), in_shared_memory=True)
    assert seen == {"y": SeenOutput("FP32", (2, 4), None)}
    assert check_answer([OutputSpec("y", "FP32", (2, 4))], seen) == []


def windows(*figures: tuple[int, float]) -> list[Window]:
    """Windows of one second: (answers, each one's latency in ms)."""
    return [Window(tuple([ms / 1e3] * count), 1.0) for count, ms in figures]


@pytest.mark.parametrize(
    ("figures", "is_stable"),
    [
        ([(100, 10.0), (100, 10.0), (100, 10.0)], True),
        ([(50, 30.0), (100, 10.0), (105, 10.5), (96, 9.6)], True),  # only the last three count
        ([(100, 10.0), (100, 10.0)], False),  # fewer than three windows
        ([(100, 10.0), (100, 10.0), (125, 10.0)], False),  # throughput 13 % above the mean
        ([(100, 10.0), (100, 10.0), (100, 12.5)], False),  # latency too
        ([(100, 10.0), (108, 10.0), (92, 10.0)], True),  # each within 8 % of their mean
        ([(100, 10.0), (100, 10.0), (0, 0.0)], False),  # a window that saw no answer
    ],
)
def test_stability_is_the_last_three_windows_within_the_percentage(
    figures: list[tuple[int, float]], is_stable: bool
) -> None:
    assert stable(windows(*figures), 10.0) is is_stable


def test_a_tighter_percentage_asks_for_closer_windows() -> None:
    close = windows((100, 10.0), (104, 10.0), (96, 10.0))
    assert stable(close, 5.0) and not stable(close, 3.0)


def statistics(requests: int, queue_ns: int, infer_ns: int) -> ModelStatistics:
    stages = dict.fromkeys(STAGES, (requests, 0)) | {
        "queue": (requests, queue_ns),
        "compute_infer": (requests, infer_ns),
    }
    return ModelStatistics(requests, requests, requests, {}, stages)


def test_a_point_takes_the_last_three_windows_and_the_servers_stages_over_them() -> None:
    ws = [
        Window((0.5,) * 10, 1.0, 0.2, statistics(10, 10_000, 100_000)),  # left out: before the last three
        Window((0.001,) * 95 + (0.002,) * 5, 1.0, 0.3, statistics(110, 20_000, 200_000)),
        Window((0.001,) * 100, 1.0, 0.3, statistics(210, 30_000, 300_000)),
        Window((0.001,) * 100, 2.0, 0.6, statistics(310, 40_000, 400_000)),
    ]
    point = perf.summarize("m", 4, 8, ws, statistics(0, 0, 0), 10.0)
    assert (point.requests, point.seconds, point.windows) == (300, 4.0, 4)
    assert point.requests_per_s == 75.0 and point.infer_per_s == 600.0
    assert point.p50_us == pytest.approx(1000.0) and point.p99_us == pytest.approx(2000.0)
    assert point.client_cpu == pytest.approx(0.3)
    # the statistics between the first window's end and the last one's: 300 requests
    assert point.server_requests == 300
    assert point.server_us["queue"] == pytest.approx(0.1) and point.server_us[
        "compute_infer"
    ] == pytest.approx(1.0)
    assert not point.stable  # 100 req/s, 100 req/s, 50 req/s


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
    [inputs], batch = perf.build_requests(SIGNATURE, META, 4, ["ids:128"], string_data="hello")
    assert batch == 4 and sorted(inputs) == ["ids", "mask", "text"]
    assert inputs["ids"].shape == (4, 128) and inputs["ids"].dtype == np.int64
    assert inputs["mask"].shape == (4, 16)
    assert inputs["text"].shape == (4, 1) and inputs["text"][0, 0] == b"hello"
    [with_scale], _ = perf.build_requests(SIGNATURE, META, None, ["ids:3", "scale:1"])
    assert with_scale["scale"].shape == (1, 1) and with_scale["text"].dtype == object


def test_inputs_from_an_npz_set_the_batch(tmp_path: Path) -> None:
    np.savez(tmp_path / "real.npz", ids=np.ones((2, 5), np.int64), text=np.array([["a"], ["b"]]))
    [inputs], batch = perf.build_requests(SIGNATURE, META, None, npz=tmp_path / "real.npz")
    assert batch == 2 and inputs["ids"].shape == (2, 5) and inputs["mask"].shape == (2, 16)
    assert inputs["text"][1, 0] == b"b"  # unicode from np.savez, sent as UTF-8 bytes
    with pytest.raises(RequestError, match=r"-b 3 with --inputs .*batch .* is 2; leave -b out"):
        perf.build_requests(SIGNATURE, META, 3, npz=tmp_path / "real.npz")


@pytest.mark.parametrize(
    ("batch", "shapes", "words"),
    [
        (1, [], r"input 'ids' has open axes \[any\] .*--shape ids:16 .*--inputs FILE.npz"),
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
        perf.build_requests(SIGNATURE, META, batch, shapes)


def test_concurrency_range_is_perf_analyzers() -> None:
    assert perf.concurrency_range("1:4") == [1, 2, 3, 4]
    assert perf.concurrency_range("1:16:5") == [1, 6, 11, 16]
    for text in ("0:4", "4:1", "1", "1:4:0", "a:b"):
        with pytest.raises(Exception, match="START:END"):
            perf.concurrency_range(text)


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


def point(model: str, concurrency: int, rate: float, p50_ms: float) -> perf.Point:
    return perf.Point(
        model, concurrency, 1, 100, 1.0, rate, rate, p50_ms * 1e3, p50_ms * 1e3, p50_ms * 1.2e3,
        p50_ms * 1.3e3, p50_ms * 2e3, 3, True, 0.4, dict.fromkeys(STAGES, 5.0), 100,
    )  # fmt: skip


def test_ratios_csv_and_plot() -> None:
    points = [point("m", 1, 100.0, 10.0), point("m_native", 1, 200.0, 4.0), point("m", 4, 300.0, 12.0)]
    assert perf.ratios(points, "m", "m_native") == [
        "native onnxruntime / m at c=1: p50 0.40x, throughput 2.00x"
    ]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=perf.CSV_FIELDS)
    writer.writeheader()
    writer.writerows(perf.csv_rows(points))
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
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
    [inputs], batch = perf.build_requests(signature, metadata, None, ["x:3,2010"])
    assert batch == 1 and inputs["x"].shape == (3, 2010)
    assert perf.expected_outputs(metadata, batch, batched=False) == [OutputSpec("y", "FP32", (-1, 2))]
    with pytest.raises(RequestError, match="input 'x' has open axes"):
        perf.build_requests(signature, metadata, None)
    with pytest.raises(RequestError, match="takes no batch axis"):
        perf.build_requests(signature, metadata, 4, ["x:3,2010"])


def test_gpu_figures_come_from_tritons_metrics_text() -> None:
    text = """# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-a"} 0.5
nv_gpu_utilization{gpu_uuid="GPU-b"} 0.25
nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1048576
nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 2097152
nv_inference_count{model="m",version="1"} 7
"""
    assert perf.gpu_reading(text) == perf.GpuReading(0.375, 3 * 1048576.0)
    assert perf.gpu_reading('nv_inference_count{model="m"} 7\n') is None  # a CPU host


def test_a_percentile_judges_stability_instead_of_the_mean() -> None:
    """Windows whose means agree but whose tails do not: stable by the mean, not by p99."""
    calm = tuple([0.001] * 99 + [0.002])
    spiky = tuple([0.001] * 98 + [0.050, 0.050])
    windows = [perf.Window(calm, 1.0), perf.Window(spiky, 1.0), perf.Window(calm, 1.0)]
    assert perf.stable(windows, 100.0)  # the means: 1.01, 1.98 and 1.01 ms, within ±100 % of theirs
    assert not perf.stable(windows, 100.0, percentile=99)  # p99: 1.01, 50 and 1.01 ms


def test_the_metrics_endpoint_is_guessed_only_beside_tritons_default_ports() -> None:
    assert perf.metrics_address("10.0.0.5:8001") == "10.0.0.5:8002"
    assert perf.metrics_address("127.0.0.1:31000") is None


def test_several_json_requests_are_sent_in_turn(tmp_path: Path) -> None:
    """perf_analyzer's JSON input data with three requests: each a whole request (the first's made-up
    inputs filled in), sent one after the other by whichever slot sends next."""
    path = tmp_path / "data.json"
    rows = [{"ids": [[i, i]], "mask": [[1] * 16], "text": [["w"]]} for i in range(3)]
    path.write_text(json.dumps({"data": rows}))
    requests, batch = perf.build_requests(SIGNATURE, META, None, input_data=str(path))
    assert batch == 1 and [r["ids"].tolist() for r in requests] == [[[0, 0]], [[1, 1]], [[2, 2]]]
    args = argparse.Namespace(protocol="http", shared_memory="none", cuda_shm=False)
    with perf.request_slots(args, requests, [], 4) as slots:
        sent: list[Any] = []

        class Client:
            async def infer(self, model: str, inputs: list[Any], outputs: Any) -> Any:
                sent.append(inputs)
                return type("Result", (), {"get_response": lambda self: {"outputs": []}})()

        load = perf.Load("http", "127.0.0.1:1", slots, 4)
        load.client = Client()
        target = perf.Target("m", [])
        for _ in range(4):
            asyncio.run(load.ask(target, 0))  # one slot asks each time: the requests still take turns
    assert [slots.index(next(s for s in slots if s[0] is inputs)) for inputs in sent] == [0, 1, 2, 0]


def test_with_shared_memory_each_slot_sends_its_own_region_set_of_every_request_in_turn() -> None:
    """request_slots lays out R region sets per slot, slot-major; a slot takes its own in turn, so two
    slots in flight never share a region and every request is sent."""
    slots: list[tuple[list[Any], list[Any]]] = [
        ([f"slot{k}-request{r}"], []) for k in range(2) for r in range(3)
    ]
    sent: list[Any] = []

    class Client:
        async def infer(self, model: str, inputs: list[Any], outputs: Any) -> Any:
            sent.append(inputs[0])
            return type("Result", (), {"get_response": lambda self: {"outputs": []}})()

    load = perf.Load("http", "127.0.0.1:1", slots, 2, outputs_in_shared_memory=True)
    load.client = Client()
    target = perf.Target("m", [])
    for slot in (1, 1, 0, 1, 1):
        asyncio.run(load.ask(target, slot))
    assert sent == [
        "slot1-request0",
        "slot1-request1",
        "slot0-request0",
        "slot1-request2",
        "slot1-request0",
    ]


def test_open_loop_load_with_region_sets_never_shares_one_between_requests_in_flight() -> None:
    """--request-rate with shared memory and several JSON requests: at most one request in flight per slot,
    each on its slot's own region sets, however many region sets the requests add."""
    slots: list[tuple[list[Any], list[Any]]] = [
        ([f"slot{k}-request{r}"], []) for k in range(2) for r in range(3)
    ]
    in_flight: set[str] = set()
    shared: list[str] = []
    most = 0

    class Client:
        async def infer(self, model: str, inputs: list[Any], outputs: Any) -> Any:
            nonlocal most
            region_set = inputs[0]
            slot = region_set.split("-")[0]
            if slot in {busy.split("-")[0] for busy in in_flight}:
                shared.append(region_set)
            in_flight.add(region_set)
            most = max(most, len(in_flight))
            await asyncio.sleep(0.005)
            in_flight.discard(region_set)
            return type("Result", (), {"get_response": lambda self: {"outputs": []}})()

    load = perf.Load("http", "127.0.0.1:1", slots, 2, outputs_in_shared_memory=True)
    load.client = Client()

    async def windows(target: Any, label: str, drive: Any, batch: int, args: Any) -> perf.Point:
        stopping = asyncio.Event()
        task = asyncio.create_task(drive([], stopping))
        await asyncio.sleep(0.2)
        stopping.set()
        await task
        return point("m", 1, 1.0, 1.0)

    load._windows = windows  # type: ignore[assignment]
    args = argparse.Namespace(seed=1, distribution="constant")
    asyncio.run(load.point_at_rate(perf.Target("m", []), 2000.0, 1, args))
    assert shared == [] and most == 2
