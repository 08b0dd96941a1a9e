"""The `triton-ort` command without a server: the offline config, the dispatcher, the infer client's
input rules and output summary (against a fake client), and the launcher's --help."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.commands import in_process
from triton_ort.cli.infer import _load_inputs, build_parser, summary
from triton_ort.cli.request_checks import ModelSignature, RequestError


def model_folder(root: Path, config: str) -> Path:
    graphs.pairwise_add(root / "pair" / "1" / "model.onnx")
    (root / "pair" / "config.pbtxt").write_text(config)
    return root / "pair"


def test_config_prints_the_auto_completed_config_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(tmp_path, 'backend: "onnxruntime_zerocopy"\n')
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 0, done.stderr
    config = text_format.Parse(done.stdout, model_config_pb2.ModelConfig())
    assert config.name == "pair" and config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [-1]),
        ("y", model_config_pb2.TYPE_FP32, [-1]),
    ]
    assert [t.name for t in config.output] == ["z"]
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" in done.stderr  # the note, beside a config that lacks the line


def test_config_of_a_folder_that_cannot_be_completed_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(tmp_path, 'backend: "onnxruntime_zerocopy"\n')
    (folder / "1" / "model.onnx").unlink()
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "model.onnx" in done.stderr, done.stderr
    assert in_process(capsys, "config", str(tmp_path / "nothing")).stderr.count("config.pbtxt") == 1


def test_config_prints_the_reshape_of_a_tensor_that_is_only_the_batch_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A [N] input or output is served as dims [1] with an empty reshape: the printed config says so, and
    pasted into config.pbtxt it passes the same checks again (Triton refuses dims [1] without it)."""
    folder = tmp_path / "strings"
    graphs.strings_beside_numbers(folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\n')
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 0, done.stderr
    config = text_format.Parse(done.stdout, model_config_pb2.ModelConfig())
    reshaped = {t.name: (list(t.dims), t.HasField("reshape")) for t in (*config.input, *config.output)}
    assert reshaped == {"s": ([1], True), "x": ([2], False), "t": ([1], True), "y": ([2], False)}
    assert all(list(t.reshape.shape) == [] for t in (*config.input, *config.output))
    (folder / "config.pbtxt").write_text(done.stdout)
    again = in_process(capsys, "config", str(folder))
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr


SEQUENCE_STATE = (
    'sequence_batching { state [ { input_name: "x", output_name: "y", data_type: TYPE_FP16, dims: [ 3 ] } ] }'
)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ('backend: "onnxruntime_zerocoppy"', "backend 'onnxruntime_zerocoppy' is not one the server has"),
        ('input [ { name: "a", data_type: TYPE_FP16, dims: [ 5 ] } ]', "axis 1 is 5 in config.pbtxt but 3"),
        ('input [ { name: "A", data_type: TYPE_FP16, dims: [ 3 ] } ]', "config input 'A' is not in the ONNX"),
        ('input [ { name: "A", dims: [ 3 ] } ]', "config input 'A' must specify 'data_type' (Triton refuses"),
        (
            'input [ { name: "a", data_type: TYPE_FP32, dims: [ 3 ] } ]',
            "config says FP32, the ONNX file says",
        ),
        ('output [ { name: "b_sum", data_type: TYPE_INT64, dims: [ 4 ] } ]', "axis 1 is 4 in config.pbtxt"),
        ('parameters { key: "gather_requests" value { string_value: "maybe" } }', "'maybe' is not a boolean"),
        ('parameters { key: "gather_request" value { string_value: "1" } }', "unknown parameter 'gather_req"),
        (
            'parameters { key: "warmup" value { string_value: "1,8" } }',
            "batch size 8 is above max_batch_size 4",
        ),
        (
            "optimization { cuda { graphs: true busy_wait_events: true } }",
            "optimization.cuda.busy_wait_events",
        ),
        (SEQUENCE_STATE, "sequence_batching.state (implicit state, inputs ['x']) is not served"),
        ('parameters { key: "hooks" value { string_value: "hooks.py" } }', "hooks module"),
    ],
)
def test_config_refuses_what_the_load_refuses_with_the_loads_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, reason: str
) -> None:
    """The load's checks that need no GPU (tests/integration/test_offline_config.py compares each with a
    real server's load error): non-zero, nothing on stdout, the reason after the model's name."""
    folder = tmp_path / "m"
    graphs.multi_io(folder / "1" / "model.onnx")
    backend = "" if config.startswith("backend") else 'backend: "onnxruntime_zerocopy"\n'
    (folder / "config.pbtxt").write_text(backend + config + "\n")
    done = in_process(capsys, "config", str(folder))
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr.startswith("triton-ort config: error: model 'm': ") and reason in done.stderr, done


@pytest.mark.parametrize("content", [b"not an onnx file", b""])
def test_config_calls_a_damaged_or_empty_onnx_file_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    folder = model_folder(tmp_path, 'backend: "onnxruntime_zerocopy"\n')
    (folder / "1" / "model.onnx").write_bytes(content)
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 2 and f"{str(folder / '1' / 'model.onnx')!r} is not a readable ONNX file" in (
        done.stderr
    ), done.stderr


def test_config_imports_the_hooks_module_as_the_load_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(
        tmp_path,
        'backend: "onnxruntime_zerocopy"\nparameters { key: "hooks" value { string_value: "h.py" } }\n',
    )
    (folder / "1" / "h.py").write_text("raise RuntimeError('no such device')\n")
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 2 and "h.py failed to import: RuntimeError: no such device" in done.stderr, done


def test_config_refuses_hooks_on_a_model_with_strings_as_the_load_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "strings"
    graphs.strings_beside_numbers(folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(
        'backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [2] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [2] }\n'
        'parameters { key: "hooks" value { string_value: "h.py" } }\n'
    )
    (folder / "1" / "h.py").write_text("def preprocess(inputs):\n    return inputs\n")
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 2 and "this model has string tensors" in done.stderr, done


def test_config_refuses_a_python_model_that_triton_ort_does_not_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(tmp_path, 'backend: "python"\n')
    (folder / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    done = in_process(capsys, "config", str(folder))
    assert done.returncode == 2 and "backend 'python' is not served by triton_ort" in done.stderr, done


def test_the_offline_config_needs_no_onnx_runtime() -> None:
    """onnxruntime is an extra (cpu) or the host's own build (onnxruntime-gpu): the load's checks that
    `config` makes read the graph with the onnx package."""
    code = "import sys, triton_ort.cli.config\nprint('onnxruntime' in sys.modules)"
    checked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (checked.returncode, checked.stdout.strip()) == (0, "False"), checked.stderr


def test_an_unknown_command_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    done = in_process(capsys, "launch")
    assert done.returncode == 1 and "unknown command 'launch'" in done.stderr and "serve" in done.stderr


def test_serve_help_shows_the_ports_and_the_startup_limit_and_its_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_ORT_STARTUP_TIMEOUT_S", "300")
    done = in_process(capsys, "serve", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stderr
    for expected in ("(default: 8000)", "(default: 8001)", "(default: 8002)", "TRITON_ORT_STARTUP_TIMEOUT_S"):
        assert expected in text, text
    assert "(default: 300.0)" in text, text  # the variable sets the default


def test_serve_given_a_model_folder_names_its_parent_before_any_server_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = model_folder(tmp_path, 'backend: "onnxruntime_zerocopy"\n')
    done = in_process(capsys, "serve", "--model-repository", str(folder))
    assert done.returncode == 1, done
    assert f"model repository {folder} is a model's folder" in done.stderr, done.stderr
    assert f"pass its parent, --model-repository {tmp_path}\n" in done.stderr, done.stderr
    assert "tritonserver" not in done.stdout  # refused before a start


class FakeClient:
    """What _load_inputs asks a tritonclient.http client: the model's config and metadata."""

    def __init__(self, config: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.config, self.metadata = config, metadata

    def get_model_config(self, model: str) -> dict[str, Any]:
        return self.config

    def get_model_metadata(self, model: str) -> dict[str, Any]:
        return self.metadata


PAIR = FakeClient(
    {
        "name": "pair",
        "max_batch_size": 4,
        "input": [
            {"name": "x", "data_type": "TYPE_FP32", "dims": [-1]},
            {"name": "y", "data_type": "TYPE_FP32", "dims": [-1]},
        ],
    },
    {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [-1, -1]},
            {"name": "y", "datatype": "FP32", "shape": [-1, -1]},
        ]
    },
)


def inputs(client: FakeClient, tmp_path: Path, *args: str) -> dict[str, Any]:
    parsed = build_parser("triton-ort").parse_args(["infer", "pair", *args])
    return _load_inputs(parsed, ModelSignature.from_config(client.config), client.metadata, client.config)


def test_shape_chooses_the_open_axes_of_generated_inputs(tmp_path: Path) -> None:
    got = inputs(PAIR, tmp_path, "--shape", "x=2,16", "--shape", "y=2,16")
    assert {name: array.shape for name, array in got.items()} == {"x": (2, 16), "y": (2, 16)}


def test_an_input_left_out_beside_given_ones_is_named_when_its_axes_are_open(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float32))
    with pytest.raises(
        RequestError, match=r"open axes without a size: input 'y' .*--shape y:16, .*--input NAME=FILE\.npy"
    ):
        inputs(PAIR, tmp_path, "--input", f"x={tmp_path / 'x.npy'}")
    with pytest.raises(RequestError, match=r"open axes without a size: input 'y' "):
        inputs(PAIR, tmp_path, "--shape", "x=2,16")


def test_inputs_come_by_name_from_one_npz_and_input_files_add_to_it(tmp_path: Path) -> None:
    x, y = np.ones((2, 16), np.float32), np.zeros((2, 16), np.float32)
    np.savez(tmp_path / "inputs.npz", x=x, y=y)
    got = inputs(PAIR, tmp_path, "--inputs", str(tmp_path / "inputs.npz"))
    assert np.array_equal(got["x"], x) and np.array_equal(got["y"], y)
    np.savez(tmp_path / "x_only.npz", x=x)
    np.save(tmp_path / "y.npy", y)
    got = inputs(
        PAIR, tmp_path, "--inputs", str(tmp_path / "x_only.npz"), "--input", f"y={tmp_path / 'y.npy'}"
    )
    assert sorted(got) == ["x", "y"]


@pytest.mark.parametrize(
    ("archive", "extra", "words"),
    [
        ("x.npy", [], r"one array \(\.npy\); expected an \.npz of inputs by name"),
        ("missing.npz", [], r"cannot read it as an \.npz"),
        ("inputs.npz", ["--input", "x=X"], r"'x' is in --inputs .* too; give it once"),
        (
            "inputs.npz",
            ["--batch", "3"],
            r"--batch 3: the batch is the files' first axis, 2; leave --batch out",
        ),
        ("other.npz", [], r"input 'z': model 'pair' has no such input; expected one of x, y"),
    ],
)
def test_an_inputs_archive_that_cannot_be_sent_is_one_line(
    tmp_path: Path, archive: str, extra: list[str], words: str
) -> None:
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float32))
    np.savez(tmp_path / "inputs.npz", x=np.zeros((2, 16), np.float32), y=np.zeros((2, 16), np.float32))
    np.savez(tmp_path / "other.npz", z=np.zeros((2, 16), np.float32))
    extra = [item.replace("=X", f"={tmp_path / 'x.npy'}") for item in extra]
    with pytest.raises(RequestError, match=words):
        inputs(PAIR, tmp_path, "--inputs", str(tmp_path / archive), *extra)


def test_with_no_input_given_every_input_is_random_with_the_batch_as_before(tmp_path: Path) -> None:
    got = inputs(PAIR, tmp_path, "--batch", "3")
    assert {name: array.shape for name, array in got.items()} == {"x": (3, 1), "y": (3, 1)}


SCALED = FakeClient(
    {
        "name": "scaled",
        "max_batch_size": 4,
        "input": [
            {"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
        ],
    },
    {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
            {"name": "scale", "datatype": "FP32", "shape": [-1, 1]},
        ]
    },
)


def test_an_optional_input_is_left_out_unless_given(tmp_path: Path) -> None:
    """An overridable initializer's input keeps the model's default: random rows would differ, and a
    one-value input refuses rows that differ."""
    assert sorted(inputs(SCALED, tmp_path, "--batch", "3")) == ["x"]
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    assert sorted(inputs(SCALED, tmp_path, "--input", f"x={tmp_path / 'x.npy'}")) == ["x"]
    np.save(tmp_path / "scale.npy", np.full((2, 1), 3.0, np.float32))
    given = inputs(
        SCALED, tmp_path, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"scale={tmp_path / 'scale.npy'}"
    )
    assert np.array_equal(given["scale"], np.full((2, 1), 3.0, np.float32))


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("x=2,sixteen", "expected NAME:D1,D2"),
        ("z=2,16", "has no input 'z'; expected one of x, y"),
        ("x=-1,16", "expected NAME"),
    ],
)
def test_a_shape_that_cannot_be_is_refused(tmp_path: Path, item: str, words: str) -> None:
    with pytest.raises(RequestError, match=words):
        inputs(PAIR, tmp_path, "--shape", item, "--shape", "y=2,16")


def test_outputs_are_summarised_in_one_line_unless_full_is_asked() -> None:
    logits = np.arange(103 * 2, dtype=np.float32).reshape(103, 2)
    line = summary("np_logits", logits, full=False)
    assert "\n" not in line and line.startswith("np_logits float32[103, 2]  [0., 1., 2., 3., 4., 5., ...]")
    assert "min 0 max 205 mean 102.5" in line, line
    assert summary("np_logits", logits, full=True).count("\n") == 103
    assert summary("flags", np.array([True, False]), full=False).startswith("flags bool[2]  [ True, False]")


def _client_commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser("triton-ort")
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", ["infer", "health", "metadata", "served-config"])
def test_every_argument_of_the_client_commands_says_what_it_is(command: str) -> None:
    parser = _client_commands()[command]
    silent = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions if not a.help]
    assert silent == [], f"triton-ort {command}: no help text for {silent}"


@pytest.mark.parametrize("command", ["served-config", "metadata", "infer", "health"])
def test_a_client_commands_help_names_the_command_as_typed(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    done = in_process(capsys, command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: triton-ort {command} "), done.stdout.splitlines()[0]


def test_a_bf16_model_is_refused_offline_for_a_triton_whose_python_backend_cannot_carry_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The load's refusal (load_checks.check_python_backend_types) where the release is given; without
    one, a note that says the command cannot know it."""
    graphs.bf16_doubler(tmp_path / "bf16" / "1" / "model.onnx")
    (tmp_path / "bf16" / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\n')
    folder = str(tmp_path / "bf16")
    unknown = in_process(capsys, "config", folder)
    assert unknown.returncode == 0 and "data_type: TYPE_BF16" in unknown.stdout
    assert "input 'x', output 'y' are BF16" in unknown.stderr and "--triton-version" in unknown.stderr
    for old in ("23.12", "2.48"):
        refused = in_process(capsys, "config", folder, "--triton-version", old)
        assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
        (line,) = refused.stderr.splitlines()
        assert line.startswith("triton-ort config: error: model 'bf16': input 'x', output 'y' are BF16")
        assert "Triton 24.08 (tritonserver 2.49)" in line
    for new in ("24.08", "2.51.0"):
        served = in_process(capsys, "config", folder, "--triton-version", new)
        assert served.returncode == 0 and "BF16" not in served.stderr, served.stderr
    assert in_process(capsys, "config", folder, "--triton-version", "latest").returncode == 2


def test_the_load_refuses_bf16_where_the_python_backend_cannot_carry_it(tmp_path: Path) -> None:
    from triton_ort import ConfigError, ModelInstance
    from triton_ort.model.autocomplete import complete_config

    graphs.bf16_doubler(tmp_path / "model.onnx")
    completed = complete_config({"name": "bf16", "max_batch_size": 0}, tmp_path)
    config = {
        "name": "bf16",
        "max_batch_size": completed.max_batch_size,
        "input": list(completed.inputs),
        "output": list(completed.outputs),
    }
    with pytest.raises(ConfigError, match=r"^input 'x', output 'y' are BF16, which this server's python"):
        ModelInstance(config, tmp_path, "CPU", 0, carries_bf16=lambda: False)
    instance = ModelInstance(config, tmp_path, "CPU", 0)  # where it can (24.08 on), it loads
    instance.close()


@pytest.mark.parametrize("command", ["infer", "health", "metadata"])
def test_every_client_command_takes_u_for_the_url_as_perf_does(command: str) -> None:
    model = ["demo"] if command != "health" else []
    parsed = build_parser("triton-ort").parse_args([command, *model, "-u", "127.0.0.1:18000"])
    assert parsed.url == "127.0.0.1:18000"
