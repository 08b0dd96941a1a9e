"""triton-ort-tritonserver's reading of tritonserver's command line (cli/tritonserver_compat.py); the
integration test starts it as Model Analyzer's local mode does."""

from __future__ import annotations

import pytest

from triton_ort.cli.tritonserver_compat import UsageError, serve_arguments


def test_model_analyzers_separate_words_become_serves_options_and_the_rest_goes_on() -> None:
    # what Model Analyzer's local mode passes (TritonServerConfig.to_args_list: name and value apart)
    argv = ["--model-repository", "/tmp/out", "--http-port", "8100", "--grpc-port", "8101", "--metrics-port",
            "8102", "--model-control-mode", "explicit", "--log-verbose", "True"]  # fmt: skip
    assert serve_arguments(argv) == [
        "--model-repository", "/tmp/out", "--http-port", "8100", "--grpc-port", "8101",
        "--metrics-port", "8102", "--log-verbose", "1", "--", "--model-control-mode=explicit",
    ]  # fmt: skip


def test_equals_form_and_valueless_options() -> None:
    argv = [
        "--model-store=/m",
        "--backend-config=python,shm-default-byte-size=1048576",
        "--disable-auto-complete-config",
    ]
    assert serve_arguments(argv) == [
        "--model-repository", "/m", "--",
        "--backend-config=python,shm-default-byte-size=1048576", "--disable-auto-complete-config",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--http-port", "1"], "--model-repository is required"),
        (["--model-repository=/a", "--model-repository=/b"], "more than one --model-repository"),
        (["--model-repository"], "--model-repository needs a value"),
        (["serve", "--model-repository=/a"], "'serve': tritonserver takes only options"),
    ],
)
def test_what_it_cannot_serve_is_one_line(argv: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        serve_arguments(argv)
