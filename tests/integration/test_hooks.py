"""Hooks and the model-to-model hand-off through a real tritonserver (2.41 here), on CPU.

demo_hooks (the shipped example) against the same ops in-process; a gathered batch through the hooks
where one request's hook failure fails that request alone; the hand-off example (BLS and ensemble) checked
by its own client.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tests.support.hooks_support import (
    HANDOFF_REPOSITORY,
    build_hooks_repository,
    expected_logits,
    expected_top_k,
    raw_features,
)
from tests.support.paths import SERVER_TOLERANCE, demo_onnx
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hooks_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    """The hook models and, from a second repository, the hand-off example served in place."""
    demo_onnx()  # the hand-off example reads the demo's ONNX file where the repository keeps it
    repository = build_hooks_repository(tmp_path_factory.mktemp("hooks"))
    # The demo is there for its ONNX file only; five python-backend stubs start, each importing torch and
    # ORT, which takes minutes on a busy 2-core machine.
    models = [
        "demo_hooks",
        "hooks_strict",
        "hooks_declared",
        "classifier",
        "preprocess_bls",
        "preprocess_step",
        "classify_ensemble",
    ]
    extra = [
        f"--model-repository={HANDOFF_REPOSITORY}",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in models),
    ]
    with LocalTritonServer(repository, extra_args=extra, startup_timeout_s=300) as running:
        yield running


def test_demo_hooks_answers_as_the_same_ops_in_process(hooks_server: LocalTritonServer) -> None:
    raw = raw_features(6, seed=1)
    want = expected_top_k(raw)
    for client in (
        httpclient.InferenceServerClient(hooks_server.http_url),
        grpcclient.InferenceServerClient(hooks_server.grpc_url),
    ):
        got, _ = infer(client, "demo_hooks", {"raw_embeddings": raw}, ["top_scores", "top_classes"])
        np.testing.assert_allclose(got["top_scores"], want["top_scores"], **SERVER_TOLERANCE)
        np.testing.assert_array_equal(got["top_classes"], want["top_classes"])
        assert got["top_classes"].dtype == np.int64


def test_a_hook_failure_in_a_gathered_batch_fails_only_its_request(hooks_server: LocalTritonServer) -> None:
    raws = [raw_features(1 + i % 3, seed=10 + i) for i in range(8)]
    raws[2][0, 5] = 255  # preprocess raises ValueError: the model's fault
    raws[5][-1, 9] = 254  # preprocess raises InputError: the client's fault
    client = grpcclient.InferenceServerClient(hooks_server.grpc_url)
    before = client.get_inference_statistics("hooks_strict", as_json=True)["model_stats"][0]

    def ask(i: int) -> dict[str, NDArray[Any]] | InferenceServerException:
        try:
            outputs = ["top_scores", "top_classes"]
            return infer(client, "hooks_strict", {"raw_embeddings": raws[i]}, outputs)[0]
        except InferenceServerException as error:
            return error

    with ThreadPoolExecutor(len(raws)) as pool:
        answers = list(pool.map(ask, range(len(raws))))
    after = client.get_inference_statistics("hooks_strict", as_json=True)["model_stats"][0]
    bug, rejected = answers[2], answers[5]
    assert isinstance(bug, InferenceServerException), bug
    assert bug.status() == "StatusCode.INTERNAL"
    assert "hooks.py:preprocess raised ValueError: a value of 255 is not allowed" in str(bug.message())
    assert isinstance(rejected, InferenceServerException), rejected
    assert rejected.status() == "StatusCode.INVALID_ARGUMENT"
    assert "hooks.py:preprocess rejected the request: 254 is reserved" in str(rejected.message())
    for i, answer in enumerate(answers):
        if i in (2, 5):
            continue
        assert isinstance(answer, dict), f"request {i}: {answer}"
        want = expected_top_k(raws[i])
        np.testing.assert_allclose(answer["top_scores"], want["top_scores"], **SERVER_TOLERANCE)
        np.testing.assert_array_equal(answer["top_classes"], want["top_classes"])
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    assert executions < len(raws), f"{len(raws)} concurrent requests took {executions} executions"


def test_the_handoff_example_answers_through_bls_and_the_ensemble(hooks_server: LocalTritonServer) -> None:
    """The example's own client, as its docstring runs it (docs/hooks.md)."""
    client_py = Path(HANDOFF_REPOSITORY) / "client.py"
    done = subprocess.run(
        [sys.executable, str(client_py), "--url", hooks_server.grpc_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["preprocess_bls", lines[0].split(": ")[1]],
        ["classify_ensemble", lines[1].split(": ")[1]],
    ]
    assert all(": ok (max difference" in line for line in lines), lines


def test_a_hooks_module_that_cannot_be_imported_fails_the_load_naming_it(
    hooks_server: LocalTritonServer,
) -> None:
    client = httpclient.InferenceServerClient(hooks_server.http_url)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("hooks_broken")
    message = str(caught.value)
    assert "hooks_broken" in message
    assert "hooks_broken/1/hooks.py failed to import: ModuleNotFoundError" in message, message
    assert "a_module_that_is_not_installed" in message
    assert client.is_server_live() and client.is_model_ready("demo_hooks")


def test_a_hooked_model_with_the_short_config_serves_what_its_hooks_declare(
    hooks_server: LocalTritonServer,
) -> None:
    """The short config and INPUTS/OUTPUTS in the hooks module: clients see the declared tensors, the
    model batches dynamically, and an optional input may be sent or left out (preprocess and postprocess
    get only what was sent)."""
    client = httpclient.InferenceServerClient(hooks_server.http_url)
    metadata = client.get_model_metadata("hooks_declared")
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        ("raw", "UINT8", [-1, 2010]),
        ("temperature", "FP32", [-1, 1]),
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["outputs"]] == [
        ("probabilities", "FP32", [-1, 2])
    ]
    config = client.get_model_config("hooks_declared")
    assert config["max_batch_size"] == 8 and "dynamic_batching" in config, config
    assert [bool(t.get("optional")) for t in config["input"]] == [False, True]
    raw = raw_features(3, seed=5)
    logits = expected_logits(raw)
    for temperature in (None, 0.5):
        inputs: dict[str, NDArray[Any]] = {"raw": raw}
        scaled = logits
        if temperature is not None:
            inputs["temperature"] = np.full((3, 1), temperature, dtype=np.float32)
            scaled = logits / temperature
        exp = np.exp(scaled - scaled.max(axis=1, keepdims=True))
        outputs, _ = infer(client, "hooks_declared", inputs, ["probabilities"])
        np.testing.assert_allclose(
            outputs["probabilities"], exp / exp.sum(axis=1, keepdims=True), **SERVER_TOLERANCE
        )


def test_a_hooked_model_that_declares_nothing_fails_its_load_with_one_line(
    hooks_server: LocalTritonServer,
) -> None:
    """Without INPUTS/OUTPUTS in the hooks module and without inputs and outputs in config.pbtxt, the
    model would be ready with a signature no client can call: its load fails saying what to declare."""
    client = httpclient.InferenceServerClient(hooks_server.http_url)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("hooks_undeclared")
    message = str(caught.value)
    assert "hooks_undeclared/1/hooks.py declares no client tensors" in message, message
    assert "INPUTS = {'raw': ('UINT8', [-1, 2010])}" in message
    assert not client.is_model_ready("hooks_undeclared")
