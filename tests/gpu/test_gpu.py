"""The zero-copy path on a real GPU: run on a GPU host (docs/gpu-host.md), skipped elsewhere.

What is checked: CUDA tensors are bound by pointer with no host<->device copy (counted by CUPTI through
torch.profiler), outputs stay on the GPU, results equal ORT on CPU within TF32 tolerance, and through a real
tritonserver, CUDA-shared-memory inputs reach model.py on the GPU with no host copy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnxruntime as ort
import pytest
import torch
from numpy.typing import NDArray
from torch.profiler import ProfilerActivity, profile

from tests.support import graphs
from tests.support.dlpack_layout import python_backend_accepts
from tests.support.paths import TF32_TOLERANCE, demo_onnx
from tests.support.repository import build_test_repository
from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session, run_requests
from triton_ort.harness.repository import pin_one_instance, read_config, write_config
from triton_ort.harness.waiting import wait_for
from triton_ort.runtime import run_plan_cache as run_plan_cache_module
from triton_ort.runtime.copy_counter import cupti_counts_from_log
from triton_ort.runtime.output_placement import OutputPlacement
from triton_ort.runtime.providers import CUDA_EP, diagnose_missing_cuda_provider
from triton_ort.runtime.session import (
    _new_session,
    cuda_options_not_applied,
    cuda_provider_options,
    ort_log_severity,
)
from triton_ort.runtime.stats import ExecuteStats

pytestmark = pytest.mark.gpu
T = TypeVar("T")

TF32 = TF32_TOLERANCE  # ORT's CUDA EP computes fp32 GEMMs in TF32 by default


def cuda_runner(path: Path, stream: torch.cuda.Stream) -> IOBindingRunner:
    """Outputs kept on the device (placement 'device'): these tests are about the zero-copy path."""
    placement = Placement("cuda", 0, stream.cuda_stream)
    return IOBindingRunner(
        create_session(path, ModelOptions(), placement), placement, output_placement=OutputPlacement("device")
    )


@contextlib.contextmanager
def on_stream(stream: torch.cuda.Stream) -> Iterator[None]:
    """Run on `stream` after what the test queued on the default stream: the tests make their inputs there,
    and Triton hands model.py inputs that are complete, so a run's reads must not overtake their making.
    (A graph's input copy on `stream` once read the previous inputs under load, 2026-12-03.)"""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield


def cpu_reference(path: Path, inputs: dict[str, torch.Tensor]) -> dict[str, NDArray[Any]]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v.cpu().numpy() for k, v in inputs.items()}), strict=True))


def host_device_copies(run: object) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()  # type: ignore[operator]
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "HtoD" in e.name or "DtoH" in e.name]


def test_cuda_inputs_are_bound_without_host_copies_and_outputs_stay_on_gpu() -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    runner = cuda_runner(demo_onnx(), stream)
    assert runner.session.get_providers()[0] == "CUDAExecutionProvider"
    x = torch.randn(100, 2010, device="cuda")
    with on_stream(stream):
        runner.run({"np_script_embeddings": x})  # warm-up: cuBLAS handles, arena
        copies = host_device_copies(lambda: runner.run({"np_script_embeddings": x}))
        out = runner.run({"np_script_embeddings": x})["np_logits"]
    stream.synchronize()
    assert copies == [], f"host<->device copies during a run on CUDA tensors: {copies}"
    assert out.device.type == "cuda"
    want = cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    np.testing.assert_allclose(out.cpu().numpy(), want, **TF32)


def test_cpu_input_for_a_gpu_session_costs_exactly_one_host_to_device_copy() -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    runner = cuda_runner(demo_onnx(), stream)
    with on_stream(stream):
        out = runner.run({"np_script_embeddings": torch.randn(4, 2010)})["np_logits"]
    stream.synchronize()
    assert runner.stats.host_to_device_copies == 1
    assert out.device.type == "cuda"


def test_several_dtypes_and_a_data_dependent_shape_on_gpu(tmp_path: Path) -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    inputs = {
        "a": torch.randn(5, 3, device="cuda").half(),
        "b": torch.randint(-9, 9, (5, 4), device="cuda"),
        "c": torch.rand(5, 2, device="cuda") > 0.5,
    }
    path = graphs.multi_io(tmp_path / "m.onnx")
    with on_stream(stream):
        got = cuda_runner(path, stream).run(inputs)
    stream.synchronize()
    for name, want in cpu_reference(path, inputs).items():
        assert got[name].device.type == "cuda"
        np.testing.assert_array_equal(got[name].cpu().numpy(), want)
    nz_path = graphs.nonzero(tmp_path / "nz.onnx")
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0]], device="cuda")
    with on_stream(stream):
        indices = cuda_runner(nz_path, stream).run({"x": x})["indices"]
    stream.synchronize()
    assert indices.device.type == "cuda"
    np.testing.assert_array_equal(indices.cpu().numpy(), cpu_reference(nz_path, {"x": x})["indices"])


def test_a_run_waits_for_fresh_inputs_only_where_ort_reads_one_on_the_host(tmp_path: Path) -> None:
    """ORT copies an input it reads on the host (a Reshape's shape) at bind time, outside our stream, so
    inputs just made on the stream are waited for first; inputs read on the device are not (ORT's
    kernels queue behind their producers on the same stream)."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    assert not cuda_runner(demo_onnx(), stream).inputs_read_on_host
    runner = cuda_runner(graphs.reshape_to(tmp_path / "r.onnx"), stream)
    assert runner.inputs_read_on_host
    big = torch.randn(4096, 4096, device="cuda")
    for _ in range(3):
        runner.reclaim_outputs()
        with on_stream(stream):
            (big @ big).sum()  # keeps the stream busy while the shape below is made behind it
            shape = torch.tensor([3, 4], device="cuda") * torch.ones(2, dtype=torch.int64, device="cuda")
            x = torch.arange(12.0, device="cuda").reshape(2, 6)
            inputs = {"x": x, "shape": shape}
            runner.check(inputs)
            y = runner.run_checked(inputs, queued=True)["y"]
        stream.synchronize()
        np.testing.assert_array_equal(y.cpu().numpy(), np.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize(
    ("placement", "rows", "on_host"),
    [
        (OutputPlacement("device"), 100, False),
        (OutputPlacement("host"), 100, True),
        (OutputPlacement("auto", host_max_bytes=800), 100, True),  # 100 rows x 2 fp32 = 800 bytes
        (OutputPlacement("auto", host_max_bytes=800), 101, False),
    ],
)
def test_output_placement_costs_one_device_to_host_copy_exactly_when_outputs_go_to_the_host(
    placement: OutputPlacement, rows: int, on_host: bool
) -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    where = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(demo_onnx(), ModelOptions(), where), where, output_placement=placement
    )
    x = torch.randn(rows, 2010, device="cuda")

    def served_run() -> dict[str, torch.Tensor]:  # as ModelInstance runs it: one run per execute
        runner.reclaim_outputs()
        return runner.run({"np_script_embeddings": x})

    with on_stream(stream):
        served_run()  # warm-up: makes the signature's plan
        copies = host_device_copies(served_run)
        binds_before = runner.stats.binds
        out = served_run()["np_logits"]
    stream.synchronize()
    assert copies == (["Memcpy DtoH (Device -> Pinned)"] if on_host else []), copies
    assert (out.device.type, out.is_pinned()) == (("cpu", True) if on_host else ("cuda", False))
    assert runner.stats.binds == binds_before + 1  # the plan's outputs stay bound: only the input is bound
    want = cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    np.testing.assert_allclose(out.cpu().numpy(), want, **TF32)


def test_host_outputs_of_several_runs_in_one_execute_stay_intact_until_the_next_execute() -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    where = Placement("cuda", 0, stream.cuda_stream)
    session = create_session(demo_onnx(), ModelOptions(), where)
    runner = IOBindingRunner(session, where, output_placement=OutputPlacement("host"))
    xs = [torch.randn(rows, 2010, device="cuda") for rows in (3, 5, 40)]  # the third outgrows the buffer
    wants = [cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"] for x in xs]
    for _ in range(2):  # the second execute reuses the pinned buffer the first one grew
        runner.reclaim_outputs()
        with on_stream(stream):
            outs = [runner.run({"np_script_embeddings": x})["np_logits"] for x in xs]
        stream.synchronize()
        for out, want in zip(outs, wants, strict=True):
            np.testing.assert_allclose(out.numpy(), want, **TF32)


@pytest.mark.parametrize("placement", ["device", "host"])
def test_cuda_graphs_replay_right_answers_for_each_shape(placement: str) -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    options = ModelOptions(cuda_graph=True)
    where = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(demo_onnx(), options, where),
        where,
        output_placement=OutputPlacement(placement),
        cuda_graph=True,
    )
    xs = {rows: torch.randn(rows, 2010, device="cuda") for rows in (4, 100)}
    for _ in range(4):  # captures, then replays
        for rows, x in xs.items():
            runner.reclaim_outputs()
            fresh = x + torch.randn_like(x)  # new values at a new address each time
            with on_stream(stream):
                out = runner.run({"np_script_embeddings": fresh})["np_logits"]
            stream.synchronize()
            want = cpu_reference(demo_onnx(), {"np_script_embeddings": fresh})["np_logits"]
            np.testing.assert_allclose(out.cpu().numpy(), want, **TF32, err_msg=f"{rows} rows")


def test_graph_plans_past_the_limit_and_repeats_in_one_execute_answer_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Signatures past MAX_CUDA_GRAPHS run as ordinary plans, and a captured signature run twice in one
    execute runs the second time as a spare plan (no graph): every answer stays right and none is
    overwritten by a later run."""
    monkeypatch.setattr(run_plan_cache_module, "MAX_CUDA_GRAPHS", 2)
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    where = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(demo_onnx(), ModelOptions(cuda_graph=True), where), where, cuda_graph=True
    )
    for _ in range(3):
        runner.reclaim_outputs()
        answers = []
        for rows in (4, 8, 16, 4):  # 16 is past the limit; 4 repeats within the execute
            x = torch.randn(rows, 2010, device="cuda")
            with on_stream(stream):
                answers.append((x, runner.run({"np_script_embeddings": x})["np_logits"]))
        stream.synchronize()
        for x, out in answers:
            want = cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
            np.testing.assert_allclose(out.cpu().numpy(), want, **TF32, err_msg=f"{len(x)} rows")
    assert runner.plans.count == 3  # two captured plans and one ordinary


def padded_graph_runner(stream: torch.cuda.Stream, placement: str) -> IOBindingRunner:
    """The demo with CUDA graphs per bucket of batch sizes, as a gathering ModelInstance sets it up."""
    where = Placement("cuda", 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(demo_onnx(), ModelOptions(cuda_graph=True), where),
        where,
        output_placement=OutputPlacement(placement),
        cuda_graph=True,
    )
    assert runner.pad_graph_batches(1024)
    return runner


@pytest.mark.parametrize("placement", ["device", "host"])
def test_padded_graphs_answer_every_batch_size_of_their_bucket(placement: str) -> None:
    """With batches padded (pad_graph_batches), six batch sizes take three graphs (buckets 4, 8 and 128),
    and every run's answer, of its own rows only, is ORT's on CPU, captured or replayed. The answer of a
    row count is the same view of its graph's buffers every time (made once: RunPlan.rows_of)."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    runner = padded_graph_runner(stream, placement)
    answers: dict[int, list[torch.Tensor]] = {}
    for _ in range(4):  # captures, then replays
        for rows in (3, 4, 5, 7, 100, 128):
            runner.reclaim_outputs()
            x = torch.randn(rows, 2010, device="cuda")  # new values at a new address each time
            with on_stream(stream):
                out = runner.run({"np_script_embeddings": x})["np_logits"]
            stream.synchronize()
            assert out.shape == (rows, 2)
            want = cpu_reference(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
            np.testing.assert_allclose(out.cpu().numpy(), want, **TF32, err_msg=f"{rows} rows")
            answers.setdefault(rows, []).append(out)
    assert runner.plans.count == runner.plans.graph_ids_given == 3
    for rows, outs in answers.items():  # the first run of a bucket is ORT's capture; then its graph's own
        assert all(out is outs[1] for out in outs[2:]), f"{rows} rows: a new view at each run"


@pytest.mark.parametrize("placement", ["device", "host"])
def test_gathered_requests_are_concatenated_into_their_bucket_graphs_input_buffer(
    placement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the second execute of a bucket on, gathering concatenates the requests straight into that
    bucket graph's input buffer, which the joint run then reads in place (the batch copied once, not
    twice); on the first, the graph does not exist yet and the batch goes into a tensor of its own. Every
    request's answer is ORT's on CPU either way."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    runner = padded_graph_runner(stream, placement)
    read: list[int] = []
    run_checked = runner.run_checked

    def recorded_run(tensors: dict[str, torch.Tensor], queued: bool) -> Any:
        read.append(tensors["np_script_embeddings"].data_ptr())
        return run_checked(tensors, queued)

    monkeypatch.setattr(runner, "run_checked", recorded_run)
    for _ in range(3):
        runner.reclaim_outputs()
        requests = [{"np_script_embeddings": torch.randn(rows, 2010, device="cuda")} for rows in (3, 60, 37)]
        with on_stream(stream):
            results = run_requests(runner, requests, gather=True)
        stream.synchronize()
        for request, result in zip(requests, results, strict=True):
            assert isinstance(result, dict), result
            want = cpu_reference(demo_onnx(), request)["np_logits"]
            np.testing.assert_allclose(result["np_logits"].cpu().numpy(), want, **TF32)
    runner.reclaim_outputs()
    buffer = runner.plans.input_buffers({"np_script_embeddings": requests[0]["np_script_embeddings"]}, 100)
    pointer = buffer["np_script_embeddings"].data_ptr()  # the bucket of 128 rows' graph, its first rows
    assert read[0] != pointer and read[1:] == [pointer, pointer]
    assert runner.plans.graph_ids_given == 1


def test_cuda_graphs_step_aside_where_a_model_cannot_be_captured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """cuda_graph on a model with a CPU-only node between CUDA nodes (ORT refuses to capture it) or with an
    output of data-dependent size: the model loads on the CUDA EP without graphs, says why in the log,
    and answers."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    where = Placement("cuda", 0, stream.cuda_stream)
    options = ModelOptions(cuda_graph=True)
    with caplog.at_level(logging.WARNING, logger="triton_ort"):
        path = graphs.cpu_node_between(tmp_path / "between.onnx")
        session = create_session(path, options, where)
        nonzero = IOBindingRunner(
            create_session(graphs.nonzero(tmp_path / "nz.onnx"), options, where), where, cuda_graph=True
        )
    print(caplog.text)
    assert session.get_providers()[0] == CUDA_EP
    assert "CUDA graphs are off for between.onnx: ONNX Runtime cannot capture this model" in caplog.text
    assert "CUDA graphs are off: outputs ['indices'] have data-dependent sizes" in caplog.text
    runner = IOBindingRunner(session, where, cuda_graph=True)
    assert not runner.plans.cuda_graph and not nonzero.plans.cuda_graph
    x = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], device="cuda")
    for _ in range(3):
        runner.reclaim_outputs()
        with on_stream(stream):
            got = runner.run({"x": x})["y"]
        stream.synchronize()
        assert got.cpu().tolist() == [[0.0, 2.0], [4.0, 0.0]]  # relu((relu(x) - 1) * 2)


def _with_placement(repository: Path, name: str, placement: str) -> None:
    """A copy of the demo named `name`, with parameter output_placement set."""
    shutil.copytree(repository / "demo", repository / name)
    config = read_config(repository / name)
    config.name = name
    config.parameters["output_placement"].string_value = placement
    write_config(repository / name, config)


def _at_least(records: list[T], count: int) -> list[T]:
    """`records` once there are `count` of them, else [] (not yet): the log is written by the stub's process,
    and its log messages reach it after its responses (through the backend's log queue)."""
    return records if len(records) >= count else []


def _concurrent_answers_are_right(url: str, models: tuple[str, ...]) -> dict[str, bool]:
    """48 concurrent requests of different sizes and values per model, so that executes gather several
    requests and split the outputs back (host views for 'auto', device views for 'device')."""
    import tritonclient.grpc as grpcclient

    from triton_ort.harness.reference import reference_outputs
    from triton_ort.harness.transport import ModelStatistics, infer

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1 + i % 7, 2010)).astype(np.float32) for i in range(48)]
    wants = [reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"] for x in xs]
    client = grpcclient.InferenceServerClient(url)
    gathered = False
    for model in models:
        before = ModelStatistics.read(client, model)

        def ask(i: int, model: str = model) -> NDArray[Any]:
            return infer(client, model, {"np_script_embeddings": xs[i]}, ["np_logits"])[0]["np_logits"]

        with ThreadPoolExecutor(16) as pool:
            for i, got in enumerate(pool.map(ask, range(len(xs)))):
                np.testing.assert_allclose(got, wants[i], **TF32, err_msg=f"{model} request {i}")
        executions = ModelStatistics.read(client, model).executions - before.executions
        gathered = gathered or executions < len(xs)
    return {"gathered": gathered}


def test_cuda_shm_requests_through_tritonserver_copy_only_what_the_output_placement_asks(
    tmp_path: Path,
) -> None:
    """CUDA-shm input, device placement: 0 host<->device copies. Auto placement of a 512-byte output:
    exactly 1 device-to-host copy. A numpy request: 1 host-to-device staging copy. Answers right in all."""
    import tritonclient.grpc as grpcclient

    from triton_ort.cli.cuda_shm import CudaShmIO
    from triton_ort.harness.reference import reference_outputs
    from triton_ort.harness.server import LocalTritonServer
    from triton_ort.harness.transport import infer

    repository = build_test_repository(tmp_path / "repository")
    _with_placement(repository, "demo_device", "device")
    # One instance each: the records are read in request order, and two stubs' log lines may interleave.
    for model in ("demo", "demo_device"):
        pin_one_instance(repository / model)
    x = np.random.default_rng(0).standard_normal((64, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG", "TRITON_ORT_COUNT_COPIES": "1"}
    layout = {"np_logits": (np.dtype(np.float32), (64, 2))}
    answers = {}
    with LocalTritonServer(repository, log_verbose=1, env=debug) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        loaded = len(server.log())  # the warm-up runs at load log records too
        for model in ("demo_device", "demo"):
            with CudaShmIO(client, model, {"np_script_embeddings": x}, layout) as shm:
                shm.infer()
                answers[f"{model} cuda-shm"] = shm.read_outputs()["np_logits"]
        answers["demo numpy"] = infer(client, "demo", {"np_script_embeddings": x}, ["np_logits"])[0][
            "np_logits"
        ]
        executes = wait_for(
            lambda: _at_least(ExecuteStats.from_log(server.log()[loaded:]), 3), 20, "3 records"
        )
        cupti = wait_for(
            lambda: _at_least(cupti_counts_from_log(server.log()[loaded:]), 3), 20, "3 CUPTI counts"
        )
        log = server.log()
        concurrent = _concurrent_answers_are_right(server.grpc_url, ("demo", "demo_device"))
    print("\n".join(line for line in log.splitlines() if "triton_ort" in line or "model.py" in line))
    for label, got in answers.items():
        np.testing.assert_allclose(got, want, **TF32, err_msg=label)
    assert re.search(r"providers \['CUDAExecutionProvider'", log), "the demo did not load on the CUDA EP"
    device, auto, numpy_request = executes[:3]
    assert device.input_devices == ["cuda:0"] and not device.outputs_on_host, device
    assert (device.host_to_device_copies, device.device_to_host_copies) == (0, 0), device
    assert auto.input_devices == ["cuda:0"] and auto.outputs_on_host, auto
    assert (auto.host_to_device_copies, auto.device_to_host_copies) == (0, 1), auto
    assert numpy_request.input_devices == ["cpu"], numpy_request
    assert (numpy_request.host_to_device_copies, numpy_request.device_to_host_copies) == (1, 1)
    assert concurrent["gathered"], "no execute gathered several requests: the split was not exercised"
    # CUPTI's count of every host<->device memcpy in the model process during each execute():
    assert cupti[:3] == [
        {"HtoD": 0, "DtoH": 0},
        {"HtoD": 0, "DtoH": 1},
        {"HtoD": 1, "DtoH": 1},
    ], f"CUPTI copies (device placement, auto placement, numpy request): {cupti}"


def test_the_cuda_provider_reports_our_device_and_stream_back() -> None:
    """The check that refuses a CUDA provider ORT created with its defaults (after an error, ORT retries
    with them): our session reports our options back in the forms the check compares; a default one does
    not. Also proves the forms: were they wrong, create_session (and every GPU test) would fail."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream)
    asked = cuda_provider_options(ModelOptions(), placement)
    ours = create_session(demo_onnx(), ModelOptions(), placement).get_provider_options()[CUDA_EP]
    assert cuda_options_not_applied(ours, asked) == {}, ours
    default = ort.InferenceSession(str(demo_onnx()), providers=[CUDA_EP]).get_provider_options()[CUDA_EP]
    assert set(cuda_options_not_applied(default, asked)) == {"has_user_compute_stream", "user_compute_stream"}


def test_a_cuda_provider_that_fails_to_start_is_named_not_dropped() -> None:
    """ORT drops a CUDA provider that fails to start (here: a device that does not exist) and prints why;
    the error reaches our diagnosis instead of a generic 'failed to load'."""
    providers: list[str | tuple[str, dict[str, str]]] = [
        ("CUDAExecutionProvider", {"device_id": str(torch.cuda.device_count() + 7)}),
        "CPUExecutionProvider",
    ]
    session, ep_error = _new_session(demo_onnx(), ModelOptions(), providers)
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert "device" in ep_error.lower(), ep_error
    assert f"could not start the CUDA provider: {ep_error}" in diagnose_missing_cuda_provider(ep_error)


def test_a_cuda_session_writes_no_ort_warning_at_our_default_level(capfd: pytest.CaptureFixture[str]) -> None:
    """ORT 1.31 logs "No registered plugin EP device found for 'CUDAExecutionProvider'" (ANSI-coloured, to
    fd 2) at every CUDA session with a device_id; at our default level it must not reach the terminal.
    docs/troubleshooting.md says why the warning is harmless."""
    logger = logging.getLogger("triton_ort")
    before = logger.level
    logger.setLevel(logging.INFO)  # the backend's level inside Triton
    try:
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        session = create_session(demo_onnx(), ModelOptions(), Placement("cuda", 0, stream.cuda_stream))
    finally:
        logger.setLevel(before)
        ort.set_default_logger_severity(ort_log_severity())
    assert session.get_providers()[0] == CUDA_EP
    printed = capfd.readouterr()
    assert "[W:onnxruntime" not in printed.err and "\x1b" not in printed.err + printed.out, printed.err


@pytest.mark.parametrize("mode", ["device", "host"])
def test_empty_outputs_on_the_gpu_are_empty_answers_the_python_backend_accepts(
    tmp_path: Path, mode: str
) -> None:
    """ORT-allocated (NonZero finding nothing: [2, 0]) and preallocated ([rows, 0], [0, n]) outputs, kept
    on the device or copied to pinned host memory: the right empty shape, with strides from_dlpack takes."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream)
    nz_path = graphs.nonzero(tmp_path / "nz.onnx")
    add_path = graphs.pairwise_add(tmp_path / "add.onnx")
    runs = [
        (nz_path, {"x": torch.zeros(3, 4, device="cuda")}, "indices", (2, 0)),
        (add_path, {"x": torch.ones(3, 0, device="cuda"), "y": torch.ones(3, 0, device="cuda")}, "z", (3, 0)),
        (add_path, {"x": torch.ones(0, 5, device="cuda"), "y": torch.ones(0, 5, device="cuda")}, "z", (0, 5)),
    ]
    for path, inputs, name, shape in runs:
        runner = IOBindingRunner(
            create_session(path, ModelOptions(), placement), placement, output_placement=OutputPlacement(mode)
        )
        runner.reclaim_outputs()
        with on_stream(stream):
            got = runner.run(inputs)[name]
        stream.synchronize()
        assert tuple(got.shape) == shape == cpu_reference(path, inputs)[name].shape
        assert got.device.type == ("cuda" if mode == "device" else "cpu")
        assert python_backend_accepts(got), (path.name, mode, got.stride())
