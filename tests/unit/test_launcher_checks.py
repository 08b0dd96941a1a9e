"""The launcher's pure parts: the model repository pre-flight and the reading of tritonserver's log."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from triton_ort.backend import BACKEND_NAME
from triton_ort.harness.checks import (
    ServerStartError,
    check_model,
    check_repository,
    load_errors,
    models_loaded_at_start,
    own_shm_prefix_is_safe,
    server_backends,
)

OUR_MODEL_PY = "from triton_ort.backend.model import TritonPythonModel\n"


def model_folder(
    repository: Path,
    backend: str,
    files: tuple[str, ...],
    versions: tuple[str, ...] = ("1",),
    **config: object,
) -> Path:
    folder = repository / "m"
    message = model_config_pb2.ModelConfig(name="m", backend=backend, **config)
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(message))
    for version in versions:
        (folder / version).mkdir()
        for name in files:  # a model.py is ours (the ONNX check applies to models that run our adapter)
            (folder / version / name).write_text(OUR_MODEL_PY if name == "model.py" else "")
    return folder


def test_a_complete_python_model_passes(tmp_path: Path) -> None:
    assert check_model(model_folder(tmp_path, "python", ("model.py", "model.onnx"))) == []


def test_the_zero_copy_backend_needs_no_model_py_only_the_onnx_file(tmp_path: Path) -> None:
    assert check_model(model_folder(tmp_path, BACKEND_NAME, ("model.onnx",))) == []
    (tmp_path / "m" / "1" / "model.onnx").unlink()
    assert check_model(tmp_path / "m") == [
        f"model 'm': ONNX file {tmp_path / 'm' / '1' / 'model.onnx'} is missing "
        "(parameter onnx_file='model.onnx', the default)"
    ]


def test_the_onnx_file_named_by_the_parameter_is_the_one_checked(tmp_path: Path) -> None:
    parameters = {"onnx_file": model_config_pb2.ModelParameter(string_value="net.onnx")}
    folder = model_folder(tmp_path, "python", ("model.py", "model.onnx"), parameters=parameters)
    (problem,) = check_model(folder)
    assert str(folder / "1" / "net.onnx") in problem and "onnx_file='net.onnx'" in problem


def test_a_missing_model_py_names_its_path_and_the_backend_that_needs_none(tmp_path: Path) -> None:
    (problem,) = check_model(model_folder(tmp_path, "python", ("model.onnx",)))
    assert str(tmp_path / "m" / "1" / "model.py") in problem and BACKEND_NAME in problem


def test_only_the_versions_triton_loads_are_checked(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "python", (), versions=("1",))
    (folder / "2").mkdir()
    for name in ("model.py", "model.onnx"):
        (folder / "2" / name).write_bytes(b"")
    assert check_model(folder) == []  # latest(1) is version 2, which is complete


def test_no_version_folder_and_no_config_are_named(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "python", (), versions=())
    assert check_model(folder) == [
        f"model 'm': {folder} has no version folder (expected e.g. {folder / '1'}/)"
    ]
    (folder / "config.pbtxt").unlink()
    (problem,) = check_model(folder)
    assert str(folder / "config.pbtxt") in problem and "missing" in problem


def test_an_unparsable_config_names_the_file_and_the_protobuf_error(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "python", ("model.py", "model.onnx"))
    (folder / "config.pbtxt").write_text('name: "m"\nbackend: "python"\nmax_batch_sise: 8\n')
    (problem,) = check_model(folder)
    assert str(folder / "config.pbtxt") in problem and "max_batch_sise" in problem


def test_the_repository_check_lists_every_problem(tmp_path: Path) -> None:
    model_folder(tmp_path, "python", ("model.onnx",))
    with pytest.raises(
        ServerStartError, match=r"(?s)^model repository check failed:\n.*model\.py is missing"
    ):
        check_repository(tmp_path)
    with pytest.raises(ServerStartError, match="does not exist"):
        check_repository(tmp_path, ["other"])
    check_repository(tmp_path, [])  # explicit model control, nothing loaded at start


def test_a_model_folder_given_as_the_repository_is_named_with_its_parent(tmp_path: Path) -> None:
    """One line naming the folder given and the one to pass, instead of "model '1': .../1/config.pbtxt is
    missing" for its version folder."""
    folder = model_folder(tmp_path, BACKEND_NAME, ("model.onnx",))
    with pytest.raises(ServerStartError) as caught:
        check_repository(folder)
    assert str(caught.value) == (
        f"model repository {folder} is a model's folder (it holds config.pbtxt and version folder 1/): "
        f"pass its parent, --model-repository {tmp_path}"
    )
    (folder / "config.pbtxt").unlink()  # a folder of version folders only (a config left to auto-complete)
    with pytest.raises(ServerStartError, match=r"holds version folder 1/\): pass its parent, "):
        check_repository(folder)
    check_repository(tmp_path, [])  # its parent is a repository


def test_a_repository_with_a_model_named_by_a_number_is_still_a_repository(tmp_path: Path) -> None:
    model_folder(tmp_path, "python", ("model.py", "model.onnx"))
    (tmp_path / "m").rename(tmp_path / "7")
    check_repository(tmp_path)  # model '7' has its own config.pbtxt: a repository, not a model's folder
    model_folder(tmp_path, "python", ("model.py", "model.onnx"))
    (tmp_path / "m" / "config.pbtxt").unlink()
    with pytest.raises(ServerStartError, match=r"model 'm'.*config\.pbtxt is missing"):
        check_repository(tmp_path)  # other folders than numbers: a repository with a broken model


def test_a_python_model_that_is_not_ours_needs_no_onnx_file(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "python", ("model.py",))
    (folder / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    assert check_model(folder) == []
    (folder / "1" / "model.py").write_text(OUR_MODEL_PY)
    (problem,) = check_model(folder)
    assert "ONNX file" in problem and str(folder / "1" / "model.onnx") in problem


def test_a_missing_hooks_module_is_named(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, BACKEND_NAME, ("model.onnx",))
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    config.parameters["hooks"].string_value = "hooks.py"
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    (problem,) = check_model(folder)
    assert str(folder / "1" / "hooks.py") in problem
    (folder / "1" / "hooks.py").write_text("")
    assert check_model(folder) == []


def test_a_misspelt_backend_is_refused_before_the_start_naming_the_closest_one(tmp_path: Path) -> None:
    """tritonserver's own error names library paths only; the launcher names the backend it has."""
    folder = model_folder(tmp_path, "onnxruntime_zerocoppy", ("model.onnx",))
    assert check_model(folder) == [
        "model 'm': backend 'onnxruntime_zerocoppy' is not one the server has "
        "(onnxruntime_zerocopy, python); did you mean onnxruntime_zerocopy?"
    ]
    with pytest.raises(ServerStartError, match="did you mean onnxruntime_zerocopy"):
        check_repository(tmp_path, backends=server_backends())
    (problem,) = check_model(model_folder(tmp_path / "far", "tensorflow", ()))
    assert problem.endswith("(onnxruntime_zerocopy, python)"), problem  # nothing close: no guess


def test_the_backends_of_an_extra_backend_directory_are_the_servers_too(tmp_path: Path) -> None:
    (tmp_path / "backends" / "custom").mkdir(parents=True)
    folder = model_folder(tmp_path / "repository", "custom", ())
    assert check_model(folder, server_backends([f"--backend-directory={tmp_path / 'backends'}"])) == []
    assert check_model(folder, server_backends()) != []


def test_a_model_is_looked_up_in_every_repository_of_the_server(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    model_folder(first, "python", ("model.py", "model.onnx"))
    second.mkdir()
    check_repository([second, first], ["m"])  # found in the second repository given
    with pytest.raises(ServerStartError, match=r"second/other or .*first/other does not exist"):
        check_repository([second, first], ["other"])


def test_a_repository_mixing_python_and_our_backend_gets_no_prefix_of_its_own(tmp_path: Path) -> None:
    python_only, ours = tmp_path / "python_only", tmp_path / "ours"
    model_folder(python_only, "python", ("model.py", "model.onnx"))
    model_folder(ours, BACKEND_NAME, ("model.onnx",))
    assert own_shm_prefix_is_safe([python_only]) and own_shm_prefix_is_safe([ours])
    assert not own_shm_prefix_is_safe([python_only, ours])


@pytest.mark.parametrize(
    ("args", "loaded"),
    [
        ([], None),
        (["--model-control-mode=explicit"], []),
        (["--model-control-mode", "explicit", "--load-model=demo", "--load-model", "b"], ["demo", "b"]),
        (["--model-control-mode=explicit", "--load-model=*"], None),
        (["--model-control-mode=poll"], None),
    ],
)
def test_models_loaded_at_start(args: list[str], loaded: list[str] | None) -> None:
    assert models_loaded_at_start(args) == loaded


# Excerpts of a real tritonserver 2.41 log (a config.pbtxt that disagrees with its ONNX file).
MISMATCH_LOG = "\n".join(
    [
        "I1130 13:16:02.531555 26745 python_be.cc:2363] TRITONBACKEND_ModelInstanceInitialize: mismatch_0_0",
        "E1130 13:16:05.793226 26745 backend_model.cc:635] ERROR: Failed to create instance: boom",
        "E1130 13:16:05.793486 26745 model_lifecycle.cc:621] failed to load 'mismatch' version 1: Internal: "
        "TritonModelException: model 'mismatch' failed to load: config.pbtxt does not match the ONNX file:",
        "  - input 'x': axis 1 is 15 in config.pbtxt but 16 in the ONNX file (config dims should be [16])",
        "",
        "At:",
        "  /tmp/r/mismatch/1/model.py(96): initialize",
        "",
        "I1130 13:16:05.793508 26745 model_lifecycle.cc:756] failed to load 'mismatch'",
        "I1130 13:16:05.793748 26745 server.cc:676] ",
        "+----------+---------+------------------------------------------------------+",
        "| Model    | Version | Status                                               |",
        "+----------+---------+------------------------------------------------------+",
        "| mismatch | 1       | UNAVAILABLE: Internal: TritonModelException: model ' |",
        "+----------+---------+------------------------------------------------------+",
        "",
        "E1130 13:16:05.803948 26745 model_lifecycle.cc:621] failed to load 'mismatch' version 1: again",
        "error: creating server: Internal - failed to load all models",
    ]
)


def test_the_model_error_comes_first_with_its_detail_and_without_the_traceback() -> None:
    assert load_errors(MISMATCH_LOG) == [
        "model 'mismatch' version 1 failed to load: Internal: TritonModelException: model 'mismatch' "
        "failed to load: config.pbtxt does not match the ONNX file:\n"
        "  - input 'x': axis 1 is 15 in config.pbtxt but 16 in the ONNX file (config dims should be [16])",
        "tritonserver: creating server: Internal - failed to load all models",
    ]


def test_a_multi_line_error_logged_on_one_line_reads_as_on_two_point_forty_one() -> None:
    """Triton 2.51 logs a model's multi-line load error as one line with its newlines escaped (seen on the
    GPU test host, 2026-12-02): the launcher gives the same lines as for 2.41's log, without the traceback."""
    log = (
        "E1202 16:15:01.000001 1 model_lifecycle.cc:641] \"failed to load 'mismatch' version 1: Internal: "
        "TritonModelException: model 'mismatch' failed to load: config.pbtxt does not match the ONNX file:"
        "\\n  - input 'x': axis 1 is 15 in config.pbtxt but 16 in the ONNX file (config dims should be [16])"
        '\\n\\nAt:\\n  /tmp/r/mismatch/1/model.py(96): initialize\\n"\n'
    )
    assert load_errors(log) == load_errors(MISMATCH_LOG)[:1]


def test_quotes_a_load_error_holds_read_as_on_two_point_forty_one() -> None:
    """Triton 2.51 escapes the quotes of a load error it logs on one line (seen on the GPU test host,
    2026-12-04: a config line the error quotes came back as `\\"/path/to/lib.so\\"`)."""
    reason = "node 'n' is of domain 'd': model_operations { op_library_filename: \"/path/to/lib.so\" }"
    quoted = reason.replace('"', '\\"')
    log = (
        "E1204 11:55:01.000001 1 model_lifecycle.cc:654] \"failed to load 'custom' version 1: Internal: "
        f'TritonModelException: {quoted}"\n'
    )
    assert load_errors(log) == [
        f"model 'custom' version 1 failed to load: Internal: TritonModelException: {reason}"
    ]


def test_a_port_in_use_is_reported() -> None:
    log = (
        "E1130 13:40:01.000001 1 main.cc:245] failed to start GRPC service: Unavailable - Socket "
        "'127.0.0.1:8001' already in use\n"
    )
    assert load_errors(log) == [
        "failed to start GRPC service: Unavailable - Socket '127.0.0.1:8001' already in use"
    ]


def test_a_backend_directory_among_the_extra_arguments_is_taken_out_in_either_form() -> None:
    from triton_ort.harness.checks import without_option

    args = ["--backend-directory=/a", "--log-verbose=1", "--backend-directory", "/b", "--exit-on-error=0"]
    assert without_option(args, "--backend-directory") == ["--log-verbose=1", "--exit-on-error=0"]


def test_serve_backend_takes_name_and_folder_or_ngcs_folder_by_name(tmp_path: Path) -> None:
    from triton_ort.cli.serve import build_parser

    parser = build_parser("triton-ort serve")
    args = parser.parse_args([f"--backend=onnxruntime={tmp_path}", "--backend", f"other={tmp_path}"])
    assert args.backend == [("onnxruntime", tmp_path), ("other", tmp_path)]
    for bad, said in (
        (f"ort={tmp_path / 'missing'}", f"backend 'ort': {tmp_path / 'missing'} is not a folder"),
        ("nothere", "backend 'nothere': /opt/tritonserver/backends/nothere does not exist here"),
        (f"={tmp_path}", "expected NAME=DIR"),
        (f"python={tmp_path}", "backend 'python': the launcher brings its own"),
    ):
        assert said in _parse_error(parser, f"--backend={bad}")


def _parse_error(parser: argparse.ArgumentParser, *argv: str) -> str:
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit):
        parser.parse_args(list(argv))
    return stderr.getvalue()


def test_a_failure_line_is_matched_to_its_model_in_both_forms() -> None:
    from triton_ort.cli.serve import _model_named

    assert _model_named("model 'a b' version 1 failed to load: x") == "a b"
    assert _model_named("model 'a': the config is missing") == "a"
