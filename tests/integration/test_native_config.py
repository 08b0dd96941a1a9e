"""A config written for Triton's native onnxruntime backend loads here with only the backend line changed,
answers as in-process ONNX Runtime does, and reports its custom metrics on the metrics port."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.metrics_port import scrape
from tests.support.paths import SERVER_TOLERANCE, demo_onnx
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer
from triton_ort.runtime.metrics import FLUSH_INTERVAL_S

pytestmark = pytest.mark.integration

# The one line a user changes in a native config: backend "onnxruntime" becomes our backend, which needs no
# model.py in the model's folder (the launcher installs it next to the python backend).
BACKEND = "onnxruntime_zerocopy"

# Written in the native backend's vocabulary only: its parameters with their value formats, its graph
# level, and its CUDA accelerator (applied where the instance lands on a GPU).
NATIVE_CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 64
input [ {{ name: "np_script_embeddings", data_type: TYPE_FP32, dims: [ 2010 ] }} ]
output [ {{ name: "np_logits", data_type: TYPE_FP32, dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_AUTO, count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
optimization {{
  graph {{ level: 1 }}
  execution_accelerators {{
    gpu_execution_accelerator [ {{
      name: "cuda"
      parameters {{ key: "cudnn_conv_use_max_workspace" value: "1" }}
      parameters {{ key: "use_ep_level_unified_stream" value: "0" }}
    }} ]
  }}
}}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
parameters {{ key: "inter_op_thread_count" value: {{ string_value: "1" }} }}
parameters {{ key: "execution_mode" value: {{ string_value: "0" }} }}
parameters {{ key: "enable_mem_arena" value: {{ string_value: "1" }} }}
parameters {{ key: "enable_mem_pattern" value: {{ string_value: "1" }} }}
parameters {{ key: "cudnn_conv_algo_search" value: {{ string_value: "1" }} }}
parameters {{ key: "arena_extend_strategy" value: {{ string_value: "1" }} }}
parameters {{ key: "gpu_mem_limit" value: {{ string_value: "4294967296" }} }}
parameters {{ key: "memory.enable_memory_arena_shrinkage" value: {{ string_value: "cpu:0" }} }}
"""


def add_native_model(repository: Path, name: str, edit: tuple[str, str] = ("", "")) -> None:
    """The native config as it is, or with one text edit (a bad value)."""
    version = repository / name / "1"
    version.mkdir(parents=True)
    shutil.copy(demo_onnx(), version / "model.onnx")
    config = NATIVE_CONFIG.format(name=name, backend=BACKEND)
    assert edit[0] in config
    (repository / name / "config.pbtxt").write_text(config.replace(*edit) if edit[0] else config)


@pytest.fixture(scope="module")
def native_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repository = tmp_path_factory.mktemp("native")
    add_native_model(repository, "native")
    # Our one parameter beyond the native vocabulary: the custom metrics the tests below read, which are
    # off by default where the python backend restarts a stub that dies (Triton 2.41, docs/reliability.md)
    with (repository / "native" / "config.pbtxt").open("a") as config:
        config.write('parameters { key: "custom_metrics" value: { string_value: "true" } }\n')
    add_native_model(
        repository,
        "native_trt_typo",
        (
            "gpu_execution_accelerator [",
            'gpu_execution_accelerator [ { name: "tensorrt" parameters { key: '
            '"precision_mode" value: "FP8" } },',
        ),
    )
    add_native_model(repository, "native_bad_level", ("level: 1", "level: 7"))
    with LocalTritonServer(
        repository, extra_args=["--model-control-mode=explicit", "--load-model=native"]
    ) as server:
        yield server


def ours(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    found = [value for (n, series), value in samples.items() if n == name and wanted <= set(series)]
    assert found, f"no {name} with labels {labels} on the metrics port"
    return sum(found)


def settled(server: LocalTritonServer, model: str, requests: float = 0.0) -> dict[Any, float]:
    """A scrape once our execute count is Triton's own (and Triton has counted `requests` successes, when
    given): our counts reach the port within FLUSH_INTERVAL_S of an execute (docs/metrics.md), Triton's
    shortly after its answers; waited for at most a few intervals, for a busy machine. The last scrape is
    returned either way, for the caller's assertions."""
    labels = {"model": model, "version": "1"}
    deadline = time.monotonic() + 5 * FLUSH_INTERVAL_S
    while True:
        samples = scrape(server)
        # (The parser names Triton's counters with a _total suffix.)
        executes = ours(samples, "nv_inference_exec_count_total", **labels)
        counted = ours(samples, "nv_inference_request_success_total", **labels) >= requests
        if counted and ours(samples, "triton_ort_executes_total", **labels) == executes:
            return samples
        if time.monotonic() > deadline:
            return samples
        time.sleep(0.02)


def test_native_config_loads_and_answers_like_onnx_runtime(native_server: LocalTritonServer) -> None:
    client = httpclient.InferenceServerClient(native_server.http_url)
    x = np.random.default_rng(7).standard_normal((6, 2010)).astype(np.float32)
    got, _ = infer(client, "native", {"np_script_embeddings": x}, ["np_logits"])
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})
    np.testing.assert_allclose(got["np_logits"], want["np_logits"], **SERVER_TOLERANCE)


def test_custom_metrics_count_requests_rows_and_runs(native_server: LocalTritonServer) -> None:
    client = httpclient.InferenceServerClient(native_server.http_url)
    labels = {"model": "native", "version": "1"}
    before = settled(native_server, "native")
    start = {
        name: ours(before, name, **labels) if any(k[0] == name for k in before) else 0.0
        for name in ("triton_ort_requests_total", "triton_ort_rows_total", "triton_ort_runs_total")
    }
    for rows in (1, 4, 7):
        infer(client, "native", {"np_script_embeddings": np.ones((rows, 2010), np.float32)}, ["np_logits"])
    # No request after these: their counts reach the metrics port by themselves.
    answered = ours(before, "nv_inference_request_success_total", **labels) + 3
    after = settled(native_server, "native", requests=answered)
    assert ours(after, "triton_ort_requests_total", **labels) - start["triton_ort_requests_total"] == 3
    assert ours(after, "triton_ort_rows_total", **labels) - start["triton_ort_rows_total"] == 12
    runs = ours(after, "triton_ort_runs_total", **labels) - start["triton_ort_runs_total"]
    assert 1 <= runs <= 3  # requests that met in one execute were gathered into one run
    assert ours(after, "triton_ort_run_seconds_total", **labels) > 0
    assert ours(after, "triton_ort_cpu_fallback", **labels) == 0
    instances = {dict(series)["instance"] for (n, series) in after if n == "triton_ort_executes_total"}
    assert any(instance.startswith("native") for instance in instances), instances


def test_a_scrape_after_a_burst_sees_every_execute(native_server: LocalTritonServer) -> None:
    """Right after a burst, with no request after it, our execute count is Triton's own: the last
    executes' counts do not wait for a next request."""
    labels = {"model": "native", "version": "1"}
    requests = 96
    client = httpclient.InferenceServerClient(native_server.http_url, concurrency=16)
    x = np.ones((1, 2010), np.float32)
    inputs = [httpclient.InferInput("np_script_embeddings", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    done_before = ours(settled(native_server, "native"), "nv_inference_request_success_total", **labels)
    for pending in [client.async_infer("native", inputs) for _ in range(requests)]:
        pending.get_result()
    after = settled(native_server, "native", requests=done_before + requests)
    triton_executes = ours(after, "nv_inference_exec_count_total", **labels)
    our_executes = ours(after, "triton_ort_executes_total", **labels)
    done = ours(after, "nv_inference_request_success_total", **labels) - done_before == requests
    assert done, "Triton did not count the burst's requests"
    assert our_executes == triton_executes, (our_executes, triton_executes)
    client.close()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("native_trt_typo", "parameter 'precision_mode': 'FP8' is not one of FP32, FP16, BF16, INT8"),
        ("native_bad_level", "optimization.graph.level: 7 is not one of -1 (basic), 0 (all), 1 (extended)"),
    ],
)
def test_bad_native_values_fail_the_load_naming_them(
    native_server: LocalTritonServer, model: str, expected: str
) -> None:
    client = httpclient.InferenceServerClient(native_server.http_url)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(model)
    assert expected in str(caught.value)
    assert client.is_server_live()
