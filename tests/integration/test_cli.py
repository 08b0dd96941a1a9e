"""The CLI and the smoke check as a user runs them (subprocesses) against the real tritonserver: a request
the model cannot take is refused before it is sent, in one line that names what was wrong and what was
expected (exit status 2); a server or model that is not there is one line too (exit status 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from tests.support.paths import DEMO_MAX_BATCH, ROOT, SERVER_TOLERANCE, demo_onnx
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer, free_port, gpu_present

pytestmark = pytest.mark.integration


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


TRITON_ORT = str(Path(sys.executable).parent / "triton-ort")
"""The installed command (the package's console script)."""


def triton_ort(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRITON_ORT, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def cli(
    server: LocalTritonServer, command: str, *args: str, protocol: str = "http"
) -> subprocess.CompletedProcess[str]:
    url = server.http_url if protocol == "http" else server.grpc_url
    return triton_ort(command, "--protocol", protocol, "--url", url, *args)


def assert_one_line_error(result: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    """One line on stderr, no traceback, nothing on stdout, and the words that say what was wrong."""
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def save(path: Path, array: NDArray[Any]) -> str:
    np.save(path, array)
    return str(path)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_infer_with_random_inputs_checks_against_saved_outputs(
    server: LocalTritonServer, tmp_path: Path, protocol: str
) -> None:
    saved = tmp_path / "out.npz"
    result = cli(server, "infer", "demo", "--batch", "3", "--save", str(saved), protocol=protocol)
    assert result.returncode == 0, result.stderr
    assert "np_logits float32[3, 2]" in result.stdout
    assert np.load(saved)["np_logits"].shape == (3, 2)


def test_infer_with_an_input_file_matches_in_process_ort(server: LocalTritonServer, tmp_path: Path) -> None:
    x = np.random.default_rng(3).standard_normal((5, 2010)).astype(np.float32)
    expected = tmp_path / "expected.npz"
    np.savez(expected, **reference_outputs(demo_onnx(), {"np_script_embeddings": x}))
    tolerance = [f"--{k}={v}" for k, v in SERVER_TOLERANCE.items()]
    x_file = save(tmp_path / "x.npy", x)
    result = cli(
        server,
        "infer",
        "demo",
        "--input",
        f"np_script_embeddings={x_file}",
        "--expect",
        str(expected),
        *tolerance,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"OK: outputs match {expected}" in result.stdout


def test_inputs_not_given_as_files_take_the_files_batch(server: LocalTritonServer, tmp_path: Path) -> None:
    a = save(tmp_path / "a.npy", np.ones((4, 3), np.float16))
    result = cli(server, "infer", "multi_io", "--input", f"a={a}", "--save", str(tmp_path / "out.npz"))
    assert result.returncode == 0, result.stderr
    outputs = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(outputs["a_twice"], np.full((4, 3), 2, np.float16))
    assert outputs["c_not"].shape == (4, 2)


@pytest.mark.parametrize(
    ("batch", "words"),
    [
        ("0", ["--batch", "0", "expected 1 or more"]),
        ("-1", ["--batch", "-1", "expected 1 or more"]),
        (str(DEMO_MAX_BATCH + 1), [f"--batch {DEMO_MAX_BATCH + 1}", f"expected 1 to {DEMO_MAX_BATCH}"]),
        ("100000", ["--batch 100000", f"expected 1 to {DEMO_MAX_BATCH}", "max_batch_size", "demo"]),
    ],
)
def test_a_batch_the_model_cannot_take_is_refused_before_sending(
    server: LocalTritonServer, batch: str, words: list[str]
) -> None:
    assert_one_line_error(cli(server, "infer", "demo", "--batch", batch), 2, *words)


@pytest.mark.parametrize(
    ("array", "words"),
    [
        (np.zeros(2010, np.float32), ["np_script_embeddings", "shape [2010]", "expected [batch, 2010]"]),
        (np.zeros((2, 2000), np.float32), ["shape [2, 2000]", "expected [batch, 2010]"]),
        (np.zeros((2, 2010), np.float64), ["dtype float64", "expected float32 (FP32)"]),
        (np.zeros((0, 2010), np.float32), ["batch 0", f"expected 1 to {DEMO_MAX_BATCH}"]),
    ],
)
def test_an_input_file_the_model_cannot_take_is_refused(
    server: LocalTritonServer, tmp_path: Path, array: NDArray[Any], words: list[str]
) -> None:
    x = save(tmp_path / "x.npy", array)
    assert_one_line_error(cli(server, "infer", "demo", "--input", f"np_script_embeddings={x}"), 2, *words)


def test_bad_input_arguments_are_refused(server: LocalTritonServer, tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.zeros((2, 2010), np.float32))
    both = cli(server, "infer", "demo", "--batch", "3", "--input", f"np_script_embeddings={x}")
    assert_one_line_error(both, 2, "--batch 3: the batch is the files' first axis, 2", "leave --batch out")
    unknown = cli(server, "infer", "demo", "--input", f"embeddings={x}")
    assert_one_line_error(unknown, 2, "'embeddings'", "expected one of np_script_embeddings")
    missing = cli(server, "infer", "demo", "--input", f"np_script_embeddings={tmp_path / 'none.npy'}")
    assert_one_line_error(missing, 2, "cannot read", "none.npy")
    no_expect = cli(server, "infer", "demo", "--expect", str(tmp_path / "none.npz"))
    assert_one_line_error(no_expect, 2, "--expect", "none.npz", "no such file")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_unknown_model_is_one_line(server: LocalTritonServer, protocol: str) -> None:
    for command in (["metadata", "no_such_model"], ["infer", "no_such_model"]):
        assert_one_line_error(cli(server, *command, protocol=protocol), 1, protocol, "no_such_model")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_no_server_is_one_line(protocol: str) -> None:
    url = f"127.0.0.1:{free_port()}"
    result = triton_ort("infer", "--protocol", protocol, "--url", url, "demo")
    assert_one_line_error(result, 1, protocol, url, "refused")


def test_smoke_against_no_server_or_an_unknown_model_is_one_line(server: LocalTritonServer) -> None:
    url = f"127.0.0.1:{free_port()}"
    assert_one_line_error(run("client.smoke", "--http-url", url), 1, "http", url, "refused")
    unknown = run(
        "client.smoke", "--http-url", server.http_url, "--grpc-url", server.grpc_url, "--model", "x"
    )
    assert unknown.returncode == 1 and "model 'x' is not ready" in unknown.stdout, unknown.stdout


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8000/", ["--url", "without the scheme", "'127.0.0.1:8000'"]),
        ("127.0.0.1:99999", ["--url", "port '99999'", "1 to 65535"]),
        ("127.0.0.1:http", ["--url", "port 'http'"]),
        ("localhost", ["--url", "'localhost' is not host:port"]),
    ],
)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_url_that_is_not_host_port_is_refused_before_connecting(
    protocol: str, url: str, words: list[str]
) -> None:
    # gRPC would dial 127.0.0.1:99999 as port 34463, and tritonclient's refusal of a scheme ends in a
    # traceback from its destructor
    result = triton_ort("metadata", "--protocol", protocol, "--url", url, "demo")
    assert_one_line_error(result, 2, *words)


@pytest.mark.skipif(gpu_present(), reason="this host has a GPU: --cuda-shm works here (tests/gpu)")
def test_cuda_shm_without_cuda_is_one_line(server: LocalTritonServer) -> None:
    assert_one_line_error(cli(server, "infer", "demo", "--cuda-shm"), 2, "--cuda-shm needs a CUDA GPU")


def test_the_installed_command_sends_a_request_and_summarises_the_output(server: LocalTritonServer) -> None:
    done = subprocess.run(
        [TRITON_ORT, "infer", "demo", "--url", server.http_url, "--batch", "100"],
        cwd=Path("/"),  # any folder: the command needs nothing from the checkout
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("np_logits float32[100, 2]  [") and " min " in lines[0], lines
    assert len(lines) == 2 and lines[1].startswith("latency "), lines  # a summary, not 100 rows


def test_the_installed_command_shows_health_and_the_served_config(server: LocalTritonServer) -> None:
    command = TRITON_ORT
    health = subprocess.run(
        [command, "health", "--url", server.http_url], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert health.returncode == 0 and "live: True  ready: True" in health.stdout, health.stderr
    served = subprocess.run(
        [command, "served-config", "demo", "--protocol", "grpc", "--url", server.grpc_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["name"] == "demo"
