"""A host model repository through docker/compose.models.yaml: served when good, and when broken the start
fails with the model's own error first in `docker compose logs`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.conftest import GRPC_URL, HTTP_URL, IMAGES, Compose, docker, inspect, repository


@pytest.fixture(scope="module")
def demo_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ONNX file the server image exported at build time."""
    target = tmp_path_factory.mktemp("onnx") / "model.onnx"
    created = docker("create", "triton-ort/server:23.12").stdout.strip()
    try:
        docker("cp", f"{created}:/models/demo/1/model.onnx", str(target))
    finally:
        docker("rm", created)
    return target


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[tuple[Compose, Path]]:
    root = tmp_path / "repository"
    compose = Compose(["docker/compose.models.yaml"], env={"TRITON_ORT_MODEL_REPOSITORY": str(root)})
    compose.down()
    try:
        yield compose, root
    finally:
        compose.down()


def test_two_line_config_model_is_served(mounted: tuple[Compose, Path], demo_onnx: Path) -> None:
    compose, root = mounted
    repository(root, "mine", demo_onnx.read_bytes())
    result = compose.up(check=False)
    assert result.returncode == 0, result.stderr + compose.logs()[-3000:]
    mounts = json.loads(inspect(compose.container(), "{{json .Mounts}}"))
    models = next(m for m in mounts if m["Destination"] == "/models")
    assert models["Source"] == str(root) and models["RW"] is False, models
    # The compose client, with the same repository mounted for its reference answer.
    smoke = compose(
        "run",
        "--rm",
        "--no-deps",
        "client",
        "--http-url",
        HTTP_URL,
        "--grpc-url",
        GRPC_URL,
        "--model-repository",
        "/models",
        "--model",
        "mine",
        check=False,
    )
    print(smoke.stdout[-1500:])
    assert smoke.returncode == 0, smoke.stdout[-2000:] + smoke.stderr[-2000:]


def test_broken_repository_fails_with_the_models_own_error_first(mounted: tuple[Compose, Path]) -> None:
    compose, root = mounted
    repository(root, "broken", b"this is not an ONNX file")
    started = time.monotonic()
    result = compose.up(check=False)
    took = time.monotonic() - started
    assert result.returncode != 0, "compose up succeeded with a broken model"
    container = compose.container()
    logs = compose.logs()
    # Warnings and errors (glog's W/E lines) that name the model.
    about_model = [
        line for line in logs.splitlines() if "broken" in line and re.search(r"\| [WE]\d{4} ", line)
    ]
    print(
        f"up failed after {took:.1f} s; restarts {inspect(container, '{{.RestartCount}}')};",
        "its first warnings and errors naming the model:",
    )
    print("\n".join(about_model[:4]))
    assert about_model, logs[-3000:]
    # The first word on the model is its own diagnosis, naming the file and the cause; Triton's generic
    # "failed to load" lines come after it. (Triton's "CudaDriverHelper has not been initialized" E-line
    # precedes it on every CPU start; it is not about the model.)
    first = about_model[0]
    assert "/models/broken/1/model.onnx" in first and "not a readable ONNX file" in first, first
    generic = [
        i
        for i, line in enumerate(about_model)
        if "Failed to create instance" in line or "failed to load" in line
    ]
    assert generic and generic[0] > 0, about_model[:6]


def test_mps_without_a_gpu_is_refused_with_the_reason() -> None:
    """TRITON_ORT_MPS=1 on a host without a GPU: the entrypoint says why and exits before tritonserver."""
    result = docker("run", "--rm", "--network", "host", "-e", "TRITON_ORT_MPS=1", IMAGES[0], check=False)
    assert result.returncode == 2, result.stdout[-1500:] + result.stderr[-1500:]
    assert "TRITON_ORT_MPS=1, but this container has no GPU" in result.stderr, result.stderr[-1500:]
