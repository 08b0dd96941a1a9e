"""`triton-ort config` against the real tritonserver: for model folders as people write them, what the
offline command prints is what the server serves for the fields auto-complete owns, and for each folder
the server refuses, the command exits non-zero with the server's reason. One server for all of them
(explicit model control, --exit-on-error=false: the refused folders fail their loads at start, side by
side with the ones that load; the launcher reads each failure from the log as `triton-ort serve` prints
it)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from tests.support import exported, graphs
from tests.support.commands import in_process
from tests.support.hooks_support import DECLARED_HOOKS, SHORT_CONFIG, UNDECLARED_HOOKS
from tests.support.paths import MODEL_REPOSITORY, ROOT, demo_onnx
from triton_ort.harness.repository import pin_one_instance
from triton_ort.harness.server import LocalTritonServer, free_ports
from triton_ort.harness.transport import PROTOCOLS, infer, make_client

pytestmark = pytest.mark.integration

TWO_LINES = 'backend: "onnxruntime_zerocopy"\n'
DEMO_INPUT = "np_script_embeddings"


def _copy_demo(path: Path) -> Path:
    return Path(shutil.copy(demo_onnx(), path))


def _damaged(path: Path) -> Path:
    path.write_bytes(demo_onnx().read_bytes()[:1000])
    return path


# name -> (ONNX file builder, config.pbtxt). Served as they are.
LOADING: dict[str, tuple[Callable[[Path], Path], str]] = {
    "sk_pipe": (exported.sklearn_classifier, TWO_LINES),  # label int64[N]: dims [1] and an empty reshape
    "strings": (graphs.strings_beside_numbers, TWO_LINES),  # a string[N] input and output: reshaped too
    # Written by hand in part: an input's type, one output of three by name only, a queue delay.
    "handwritten": (
        graphs.multi_io,
        TWO_LINES
        + "max_batch_size: 8\n"
        + 'input [ { name: "b", data_type: TYPE_INT64, dims: [ 4 ] } ]\n'
        + 'output [ { name: "a_twice" } ]\n'
        + "dynamic_batching { max_queue_delay_microseconds: 100 }\n",
    ),
    "accumulator": (exported.accumulator, TWO_LINES + "max_batch_size: 8\n" + exported.SEQUENCE_CONFIG),
    # Initializers listed as graph inputs (defaults a request may override): optional inputs. `scale [1]`
    # has no batch axis: not batched without max_batch_size, as the native backend decides it...
    "overridable": (graphs.overridable, TWO_LINES),
    # ...and batched where the config sets max_batch_size, scale then sent as [rows, 1]
    "overridable_batched": (graphs.overridable, TWO_LINES + "max_batch_size: 8\n"),
    # The short config of a hooked model: inputs, outputs and batching from the hooks module's declarations.
    "hooks_declared": (_copy_demo, SHORT_CONFIG),
}
if importlib.util.find_spec("onnxruntime_extensions") is not None:  # requirements-dev.txt, tests only
    import onnxruntime_extensions

    # A custom operator (ai.onnx.contrib NegPos) with the library that registers it, as the native backend
    # takes it
    LOADING["custom_op"] = (
        graphs.contrib_negpos,
        TWO_LINES
        + f'model_operations {{ op_library_filename: "{onnxruntime_extensions.get_library_path()}" }}\n',
    )
# name -> (ONNX file builder, config.pbtxt): each one refused at load, and offline.
REFUSED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "wrong_dims": (_copy_demo, TWO_LINES + f'input [ {{ name: "{DEMO_INPUT}", dims: [ 2000 ] }} ]\n'),
    "wrong_input_name": (
        _copy_demo,
        TWO_LINES + 'input [ { name: "embeddings", data_type: TYPE_FP32, dims: [ 2010 ] } ]\n',
    ),
    # Refused by Triton itself before the model's checks run: auto-complete cannot type it
    "untyped_input": (_copy_demo, TWO_LINES + 'input [ { name: "embeddings", dims: [ 2010 ] } ]\n'),
    "bad_parameter": (
        _copy_demo,
        TWO_LINES + 'parameters { key: "gather_requests" value { string_value: "maybe" } }\n',
    ),
    # max_batch_size 4 comes from auto-complete: the check is made on the completed config
    "bad_warmup": (_copy_demo, TWO_LINES + 'parameters { key: "warmup" value { string_value: "1,8" } }\n'),
    "bad_accelerator": (
        _copy_demo,
        TWO_LINES
        + 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrtt" } ] } }\n',
    ),
    "control_type": (
        exported.accumulator,
        TWO_LINES
        + "max_batch_size: 8\n"
        + exported.SEQUENCE_CONFIG.replace("data_type: TYPE_UINT64", "data_type: TYPE_UINT32"),
    ),
    "damaged_onnx": (_damaged, TWO_LINES),
    # A node of a domain no one implements, without model_operations: named with the line to add
    "custom_op_unregistered": (graphs.custom_op, TWO_LINES),
    "custom_op_missing_library": (
        graphs.custom_op,
        TWO_LINES + 'model_operations { op_library_filename: "/nonexistent/libcustom_ops.so" }\n',
    ),
    # Only an input with a default (an initializer of its name) may be optional.
    "optional_required": (
        _copy_demo,
        TWO_LINES
        + f'input [ {{ name: "{DEMO_INPUT}", data_type: TYPE_FP32, dims: [ 2010 ], optional: true }} ]\n',
    ),
    # Hooks that declare nothing, and a config without inputs and outputs: nobody could call the model.
    "hooks_undeclared": (_copy_demo, SHORT_CONFIG),
}
HOOKS_SOURCE = {"hooks_declared": DECLARED_HOOKS, "hooks_undeclared": UNDECLARED_HOOKS}
# Loaded after the start: the launcher refuses to start a server that loads it (the last test).
MISSPELT = "misspelt_backend"
MISSPELT_CONFIG = 'backend: "onnxruntime_zerocoppy"\n'
# What the reader of the file adds after "is not a readable ONNX file: " is its own: the onnx package's
# offline, ONNX Runtime's at load.
UNREADABLE = " is not a readable ONNX file: "
# Where the server's reason is Triton core's own words, what both say (the offline one names the entry).
SHARED_WORDS = {"untyped_input": "'data_type'"}


def _add(repository: Path, name: str, build: Callable[[Path], Path], config: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    build(repository / name / "1" / "model.onnx")
    (repository / name / "config.pbtxt").write_text(config)
    if name in HOOKS_SOURCE:
        (repository / name / "1" / "hooks.py").write_text(HOOKS_SOURCE[name])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTritonServer, Path]]:
    repository = tmp_path_factory.mktemp("offline_config")
    for shipped in ("demo", "demo_hooks"):  # complete configs, the demo's with its own model.py
        shutil.copytree(MODEL_REPOSITORY / shipped, repository / shipped)
        pin_one_instance(repository / shipped)
    _copy_demo(repository / "demo" / "1" / "model.onnx")
    for name, (build, config) in {**LOADING, **REFUSED}.items():
        if name == "sk_pipe" and importlib.util.find_spec("skl2onnx") is None:
            continue  # a dev requirement; the GPU test host may lack it (the test says so)
        _add(repository, name, build, config)
    _add(repository, MISSPELT, _copy_demo, MISSPELT_CONFIG)
    at_start = [p.name for p in repository.iterdir() if p.name != MISSPELT]
    args = [
        "--model-control-mode=explicit",
        "--exit-on-error=false",
        *(f"--load-model={n}" for n in at_start),
    ]
    with LocalTritonServer(repository, extra_args=args, startup_timeout_s=600) as server:
        yield server, repository


def _offline(capsys: pytest.CaptureFixture[str], folder: Path) -> tuple[int, str, str]:
    done = in_process(capsys, "config", str(folder))
    return done.returncode, done.stdout, done.stderr


def _owned(config: model_config_pb2.ModelConfig) -> model_config_pb2.ModelConfig:
    """The fields auto-complete owns: max_batch_size, inputs, outputs (reshape included), dynamic_batching."""
    owned = model_config_pb2.ModelConfig(max_batch_size=config.max_batch_size)
    owned.input.extend(config.input)
    owned.output.extend(config.output)
    if config.HasField("dynamic_batching"):
        owned.dynamic_batching.CopyFrom(config.dynamic_batching)
    return owned


@pytest.mark.parametrize("model", ["demo", "demo_hooks", *LOADING])
def test_the_offline_config_is_the_served_config(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str], model: str
) -> None:
    server, repository = served
    if not (repository / model).exists():
        pytest.skip(f"{model}: its exporter is not installed here (requirements-dev.txt)")
    code, stdout, stderr = _offline(capsys, repository / model)
    assert code == 0, stderr
    offline = _owned(text_format.Parse(stdout, model_config_pb2.ModelConfig()))
    client = httpclient.InferenceServerClient(server.http_url)
    served_config = json_format.ParseDict(
        client.get_model_config(model), model_config_pb2.ModelConfig(), ignore_unknown_fields=True
    )
    if served_config.HasField("dynamic_batching") and not offline.dynamic_batching.preferred_batch_size:
        # Triton's own default (max_batch_size), added after auto-complete as instance_group is
        served_config.dynamic_batching.ClearField("preferred_batch_size")
    assert text_format.MessageToString(offline) == text_format.MessageToString(_owned(served_config))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_request_written_from_the_onnx_file_is_answered_without_max_batch_size(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    """x [N, 4] beside an overridable scale [1]: without max_batch_size in config.pbtxt the model is not
    batched (the native backend batches only when every input has an open first axis), so the request
    a user writes from the ONNX file, x [3, 4] and scale [1], is taken as it is and answered as ONNX
    Runtime answers it."""
    server, repository = served
    code, _, stderr = _offline(capsys, repository / "overridable")
    assert code == 0 and "one value per request" not in stderr, stderr
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((3, 4)).astype(np.float32), "scale": np.array([-1.5], np.float32)}
    client = make_client(protocol, server.http_url if protocol == "http" else server.grpc_url)
    outputs, _ = infer(client, "overridable", inputs, ["y"])
    session = ort.InferenceSession(str(repository / "overridable" / "1" / "model.onnx"))
    (expected,) = session.run(["y"], inputs)
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outputs["y"], inputs["x"] * -1.5, rtol=1e-6)


def test_a_config_that_sets_max_batch_size_keeps_one_value_inputs_and_says_so(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """With max_batch_size in config.pbtxt, scale is sent with the batch axis, its one value in each row;
    the load's log and the offline command say so in one line."""
    server, repository = served
    code, _, stderr = _offline(capsys, repository / "overridable_batched")
    notes = [line for line in stderr.splitlines() if "one value per" in line]
    assert code == 0 and len(notes) == 1 and "'scale' as [rows, 1]" in notes[0], stderr
    reason = notes[0].removeprefix("note: ")
    assert f"model 'overridable_batched': {reason}" in server.log()
    x = np.ones((3, 4), np.float32)
    client = make_client("http", server.http_url)
    outputs, _ = infer(
        client, "overridable_batched", {"x": x, "scale": np.full((3, 1), 3.0, np.float32)}, ["y"]
    )
    np.testing.assert_allclose(outputs["y"], x * 3.0)


def test_a_custom_operator_is_served_through_its_library_and_without_one_the_node_is_named(
    served: tuple[LocalTritonServer, Path],
) -> None:
    server, _ = served
    errors = {e.split("'")[1]: e for e in server.failed_models()}
    assert (
        "node 'fancy' (op type 'MyFancyOp') is of domain 'com.example', which ONNX Runtime does not "
        "implement: register the custom-op library that does in config.pbtxt: model_operations { "
        'op_library_filename: "/path/to/libcustom_ops.so" }'
    ) in errors["custom_op_unregistered"]
    assert "is not a registered function/op" not in errors["custom_op_unregistered"]
    assert "'/nonexistent/libcustom_ops.so' does not exist" in errors["custom_op_missing_library"]
    if "custom_op" not in LOADING:
        pytest.skip("onnxruntime-extensions is not installed here (requirements-dev.txt)")
    x = np.array([[1.0, -2.0, 3.0, -4.0], [-0.5, 0.0, 0.5, 8.0]], np.float32)
    outputs, _ = infer(make_client("http", server.http_url), "custom_op", {"x": x}, ["neg", "pos"])
    np.testing.assert_array_equal(outputs["neg"], np.minimum(x, 0))
    np.testing.assert_array_equal(outputs["pos"], np.maximum(x, 0))


def test_the_label_of_a_classifier_is_served_and_printed_with_its_reshape(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """What the comparison above covers, said outright: `dims: [1]` alone, pasted into config.pbtxt,
    fails the load."""
    _, repository = served
    if not (repository / "sk_pipe").exists():
        pytest.skip("skl2onnx is not installed here (requirements-dev.txt)")
    code, stdout, stderr = _offline(capsys, repository / "sk_pipe")
    assert code == 0, stderr
    label = next(
        t for t in text_format.Parse(stdout, model_config_pb2.ModelConfig()).output if t.name == "label"
    )
    assert list(label.dims) == [1] and label.HasField("reshape") and list(label.reshape.shape) == []


@pytest.mark.parametrize("model", list(REFUSED))
def test_what_the_server_refuses_the_offline_config_refuses_with_the_same_reason(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str], model: str
) -> None:
    server, repository = served
    code, stdout, stderr = _offline(capsys, repository / model)
    assert (code, stdout) == (2, ""), stderr
    prefix = f"triton-ort config: error: model '{model}': "
    assert stderr.startswith(prefix), stderr
    reason = stderr.removeprefix(prefix).rstrip("\n")
    errors = {e.split("'")[1]: e for e in server.failed_models()}
    assert model in errors, f"{model} loaded on the server:\n{server.log()[-3000:]}"
    if UNREADABLE in reason:
        reason = reason.partition(UNREADABLE)[0] + UNREADABLE
    if model in SHARED_WORDS:
        assert SHARED_WORDS[model] in reason and "'embeddings'" in reason, reason
        reason = SHARED_WORDS[model]
    assert reason in errors[model], f"offline: {reason}\nserver: {errors[model]}"


def test_a_misspelt_backend_is_named_with_the_closest_one_offline_and_before_tritonserver_starts(
    served: tuple[LocalTritonServer, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    server, repository = served
    code, stdout, stderr = _offline(capsys, repository / MISSPELT)
    assert (code, stdout) == (2, ""), stderr
    line = stderr.removeprefix("triton-ort config: error: ").rstrip("\n")
    assert "'onnxruntime_zerocoppy'" in line and line.endswith("did you mean onnxruntime_zerocopy?"), line
    # tritonserver's own refusal names the backend too, without a suggestion
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
    with pytest.raises(InferenceServerException, match="onnxruntime_zerocoppy"):
        client.load_model(MISSPELT)
    # `triton-ort serve` gives the offline line before it starts tritonserver at all
    shutil.copytree(repository / MISSPELT, tmp_path / "repository" / MISSPELT)
    ports = [
        f"--{service}-port={port}"
        for service, port in zip(("http", "grpc", "metrics"), free_ports(3), strict=True)
    ]
    serve = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_ort.cli",
            "serve",
            f"--model-repository={tmp_path / 'repository'}",
            *ports,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode == 1 and line in serve.stderr.splitlines(), serve.stderr
    assert "tritonserver ready" not in serve.stdout and "full log" not in serve.stderr, serve.stderr
