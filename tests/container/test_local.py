"""A machine without a registry, as a newcomer meets it: `make up` (and the other compose targets) stop at
once with one line naming the causes and the path that works here, the build context stays small for
either builder, and `make up-local MODEL_REPOSITORY=DIR` serves a repository of one's own."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.container.conftest import (
    DOCKER,
    GRPC_URL,
    HTTP_URL,
    PORTS,
    PROJECT,
    REPO,
    Compose,
    docker,
    inspect,
    make,
    repository,
)
from tests.support import graphs

TRITON_BASE = "nvcr.io/nvidia/tritonserver:23.12-py3"  # docker/Dockerfile's default TRITON_IMAGE


def _registry_reachable() -> bool:
    present = docker("image", "inspect", TRITON_BASE, check=False).returncode == 0
    return present or docker("manifest", "inspect", TRITON_BASE, check=False, timeout=30).returncode == 0


def _own_lines(stderr: str) -> list[str]:
    """stderr without make's own closing line (`make: *** [...] Error 1`)."""
    return [
        line for line in stderr.splitlines() if line.strip() and not re.match(r"make(\[\d+\])?: \*\*\*", line)
    ]


@pytest.mark.parametrize("target", ["up", "docker-build", "smoke-docker"])
def test_compose_targets_fail_fast_without_a_registry(target: str, tmp_path: Path) -> None:
    if _registry_reachable():
        pytest.skip(f"{TRITON_BASE} can be had on this machine")
    for label, env in (("as it is", {}), ("without the Compose plugin", {"DOCKER_CONFIG": str(tmp_path)})):
        started = time.monotonic()
        result = make(target, timeout=60, env=env)
        took = time.monotonic() - started
        lines = _own_lines(result.stderr)
        print(f"make {target} ({label}): exit {result.returncode} after {took:.1f} s: {lines}")
        assert result.returncode != 0
        assert len(lines) == 1, result.stderr[-3000:]
        assert TRITON_BASE in lines[0] and "make up-local" in lines[0], lines[0]
        if env:
            assert "Compose" in lines[0], lines[0]
        assert took < 30
        assert not result.stdout.strip(), result.stdout[-2000:]


def test_build_context_is_small_for_the_classic_builder() -> None:
    """The classic builder reads only the root .dockerignore; the checkout has a .venv of gigabytes."""
    result = subprocess.run(
        [DOCKER, "build", "--network", "host", "-f", "-", "."],
        input="FROM scratch\n",
        cwd=REPO,
        env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    sent = re.search(r"Sending build context to Docker daemon\s+([\d.]+)\s*([kMG]?B)", result.stdout)
    assert sent, result.stdout[-2000:] + result.stderr[-2000:]
    size = float(sent[1]) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[sent[2]]
    print(f"classic builder's context: {sent[1]} {sent[2]}")
    assert size < 5e6


def test_up_local_serves_your_own_repository(tmp_path: Path) -> None:
    """`make up-local MODEL_REPOSITORY=DIR` (on the tier's ports and project): a model of several inputs and
    types with the README's two-line config, answered over HTTP and gRPC, mounted read-only."""
    onnx = graphs.multi_io(tmp_path / "multi_io.onnx").read_bytes()
    root = repository(tmp_path / "models", "mine", onnx)
    args = [f"{name}={port}" for name, port in PORTS.items()]
    args += [f"LOCAL_PROJECT={PROJECT}", f"MODEL_REPOSITORY={root}"]
    Compose().down()
    try:
        started = time.monotonic()
        up = make("up-local", *args, timeout=600)
        print(f"make up-local: exit {up.returncode} after {time.monotonic() - started:.1f} s")
        print(up.stdout[-1200:])
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        metrics_url = f"http://127.0.0.1:{PORTS['METRICS_PORT']}/metrics"
        for where in (f"http://{HTTP_URL}", GRPC_URL, metrics_url, str(root)):
            assert where in up.stdout, where
        assert re.search(r"mine \(READY\)", up.stdout), up.stdout[-1500:]

        mounts = inspect(Compose().container(), "{{range .Mounts}}{{.Destination}} {{.RW}};{{end}}")
        assert "/models false;" in mounts, mounts

        rng = np.random.default_rng(0)
        a = rng.standard_normal((2, 3)).astype(np.float16)
        b = rng.integers(-5, 5, (2, 4), dtype=np.int64)
        c = rng.integers(0, 2, (2, 2)).astype(bool)
        expected = {"a_twice": a + a, "b_sum": b.sum(axis=1, keepdims=True), "c_not": ~c}
        for module, url in ((httpclient, HTTP_URL), (grpcclient, GRPC_URL)):
            inputs = []
            for name, value, dtype in (("a", a, "FP16"), ("b", b, "INT64"), ("c", c, "BOOL")):
                item = module.InferInput(name, list(value.shape), dtype)
                item.set_data_from_numpy(value)
                inputs.append(item)
            result = module.InferenceServerClient(url).infer("mine", inputs)
            for name, want in expected.items():
                np.testing.assert_array_equal(result.as_numpy(name), want, err_msg=f"{url} {name}")
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            assert 'nv_inference_count{model="mine"' in response.read().decode()
    finally:
        down = make("down-local", *args, timeout=180)
        print(down.stdout[-500:], down.stderr[-500:])
    assert down.returncode == 0, down.stderr[-2000:]
    assert not Compose()("ps", "--all", "--quiet").stdout.strip()
