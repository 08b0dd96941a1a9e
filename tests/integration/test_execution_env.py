"""docs/execution-env.md's recipe on the real tritonserver: model folders that carry their own Python
environment (EXECUTION_ENV_PATH, packed by scripts/pack_env.py) and are served from it.

Backend "python": config.pbtxt, 1/model.py (the library's adapter), 1/model.onnx and env.tar.gz. Backend
"onnxruntime_zerocopy": the same without model.py (the backend directory holds it). The proof that the
archive, not the server's own Python, runs each model: the stub's VIRTUAL_ENV is the python backend's
extraction of the archive, ONNX Runtime's native library is mapped into the stub from there and from nowhere
else (torch's is not mapped at all: these CPU instances run on numpy), and that environment's python3 imports
triton_ort from its own site-packages.

The archive is packed without torch (`--no-torch`: these CPU instances have no hooks); `make
test-execution-env` runs this file alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2

from tests.support.paths import ROOT, demo_onnx
from triton_ort.backend import BACKEND_NAME, MODEL_PY
from triton_ort.harness.processes import stub_processes
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.repository import ModelSpec, TensorSpec, write_config
from triton_ort.harness.server import LocalTritonServer

# Both backend lines take EXECUTION_ENV_PATH: `python` with the adapter in the folder (a stock image as it
# is), and our Python-based backend (its one model.py added to the image's backend directory).
PYTHON_LINE = "demo_env_python"
ZERO_COPY_LINE = "demo_env_zerocopy"
MODELS = (PYTHON_LINE, ZERO_COPY_LINE)
ARCHIVE = "env.tar.gz"
LOAD_ONE_AT_A_TIME = "--model-load-thread-count=1"
EXECUTION_ENV = {"EXECUTION_ENV_PATH": f"$$TRITON_MODEL_DIRECTORY/{ARCHIVE}"}
# python_backend's EnvironmentManager extracts archives under /tmp/python_env_XXXXXX (src/pb_env.cc).
EXTRACTION_ROOT = "/tmp/python_env_"
# The native library that only a real ONNX Runtime maps into the stub, and torch's, which a CPU instance
# without hooks never loads.
NATIVE = {"onnxruntime": "onnxruntime_pybind11_state"}
NOT_LOADED = {"torch": "libtorch_cpu.so"}

pytestmark = pytest.mark.execution_env


def _why_packing_cannot_run() -> str | None:
    """Why scripts/pack_env.py cannot build the archive on this host, in one line; None when it can.

    It builds a fresh venv with pip from the pinned stack and packs it with venv-pack: a host without
    either (the GPU test host has a preinstalled stack, no venv-pack and no package index) cannot run
    the recipe at all, which is not a failure of the recipe."""
    if importlib.util.find_spec("venv_pack") is None:
        return "scripts/pack_env.py needs venv-pack (requirements-dev.txt), which this Python lacks"
    # Can pip find the stack's torch? (an index, or find-links); one quick try, no retries
    index = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "torch", "--retries", "0", "--timeout", "10"],
        capture_output=True,
        text=True,
        check=False,
    )
    if index.returncode != 0:
        said = next((line for line in reversed(index.stderr.splitlines()) if line.strip()), "no output")
        return f"scripts/pack_env.py installs with pip, which finds no package index here: {said}"
    return None


def _pack(archive: Path) -> None:
    started = time.monotonic()
    packed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "pack_env.py"),
            "--stack",
            "cpu",
            "--no-torch",
            "--out",
            str(archive),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert packed.returncode == 0, f"pack_env.py failed:\n{packed.stderr[-3000:]}"
    report = json.loads(packed.stdout.strip().splitlines()[-1])
    print(f"packed in {time.monotonic() - started:.0f} s: {report}")
    assert report["requirements"] == "requirements-cpu.txt without torch", report


def _files(model_dir: Path) -> list[str]:
    return sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe: pack the env for this Python (the local stub's), then a model folder around it, once
    per backend line."""
    cannot = _why_packing_cannot_run()
    if cannot:
        pytest.skip(cannot)
    repository = tmp_path_factory.mktemp("execution_env")
    python_dir = repository / PYTHON_LINE
    (python_dir / "1").mkdir(parents=True)
    shutil.copy(demo_onnx(), python_dir / "1" / "model.onnx")
    (python_dir / "1" / "model.py").write_text(MODEL_PY)
    spec = ModelSpec(
        PYTHON_LINE,
        (TensorSpec("np_script_embeddings", "FP32", (2010,)),),
        (TensorSpec("np_logits", "FP32", (2,)),),
        # The packed stack is the CPU one: keep the instance there on a host with a GPU too.
        kind="KIND_CPU",
        parameters=EXECUTION_ENV,
    )
    write_config(python_dir, spec.config())
    _pack(python_dir / ARCHIVE)
    assert _files(python_dir) == ["1/model.onnx", "1/model.py", "config.pbtxt", ARCHIVE]

    # The two-line config: the backend completes inputs, outputs and batching from the ONNX file.
    zero_copy_dir = repository / ZERO_COPY_LINE
    (zero_copy_dir / "1").mkdir(parents=True)
    shutil.copy(demo_onnx(), zero_copy_dir / "1" / "model.onnx")
    os.link(python_dir / ARCHIVE, zero_copy_dir / ARCHIVE)  # the same bytes, without a second 300 MB
    config = model_config_pb2.ModelConfig(name=ZERO_COPY_LINE, backend=BACKEND_NAME)
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.Kind.KIND_CPU)
    config.parameters["EXECUTION_ENV_PATH"].string_value = EXECUTION_ENV["EXECUTION_ENV_PATH"]
    write_config(zero_copy_dir, config)
    assert _files(zero_copy_dir) == ["1/model.onnx", "config.pbtxt", ARCHIVE]
    return repository


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[LocalTritonServer]:
    started = time.monotonic()
    # One model load at a time: python_backend extracts an archive after a process-wide chdir() into its
    # destination, under a lock of its backend only (src/pb_env.cc, ExtractTarFile, 23.12 to main), so two
    # backends extracting at once write into each other's folder (seen here: "Can't create
    # 'include/python3.11'" and a missing bin/activate).
    with LocalTritonServer(repository, extra_args=[LOAD_ONE_AT_A_TIME], startup_timeout_s=240) as running:
        print(f"ready {time.monotonic() - started:.0f} s after start (extractions, torch and ORT imports)")
        yield running


def _stub(server: LocalTritonServer, model: str) -> psutil.Process:
    assert server.process is not None
    stubs = [pid for pid, model_py in stub_processes(server.process.pid).items() if model in model_py]
    assert len(stubs) == 1, f"expected one stub for {model}, found {stubs}"
    return psutil.Process(stubs[0])


@pytest.mark.parametrize("model", MODELS)
def test_model_answers_like_onnx_runtime(server: LocalTritonServer, model: str) -> None:
    batch = np.random.default_rng(7).standard_normal((3, 2010)).astype(np.float32)
    client = httpclient.InferenceServerClient(server.http_url)
    request = httpclient.InferInput("np_script_embeddings", list(batch.shape), "FP32")
    request.set_data_from_numpy(batch)
    result = client.infer(model, [request], outputs=[httpclient.InferRequestedOutput("np_logits")])
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": batch})["np_logits"]
    np.testing.assert_allclose(result.as_numpy("np_logits"), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_the_archive_not_the_servers_python_runs_the_model(
    server: LocalTritonServer, repository: Path, model: str
) -> None:
    assert f"Using Python execution env {repository / model / ARCHIVE}" in server.log()
    stub = _stub(server, model)
    env = Path(stub.environ()["VIRTUAL_ENV"])
    print(f"stub {stub.pid}: VIRTUAL_ENV={env}")
    assert str(env).startswith(EXTRACTION_ROOT), f"the stub's VIRTUAL_ENV {env} is not an extracted archive"
    mapped = {region.path for region in stub.memory_maps()}
    own_prefix = Path(sys.prefix).resolve()
    for package, library in NATIVE.items():
        paths = sorted(path for path in mapped if library in Path(path).name)
        print(f"{package}: {paths}")
        assert paths, f"{library} is not mapped into the stub: {package} did not load"
        assert all(Path(path).is_relative_to(env) for path in paths), f"{package} loaded from outside {env}"
        assert not any(Path(path).resolve().is_relative_to(own_prefix) for path in paths)
    for package, library in NOT_LOADED.items():
        assert not [path for path in mapped if library in Path(path).name], f"{package} was loaded"
    assert not list(env.glob("lib/python3*/site-packages/torch")), "packed with --no-torch, torch is there"
    # The stub's embedded interpreter takes sys.prefix from <env>/bin/python3 (first on PATH after
    # bin/activate); that interpreter, so activated, imports triton_ort from the archive's site-packages.
    probe = subprocess.run(
        ["bash", "-c", f'source "{env}/bin/activate" && exec python3 -I -c "$0"', _PROBE],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(probe.stdout)
    print(f"the archive's python3: {found}")
    assert Path(found["prefix"]) == env
    assert Path(found["triton_ort"]).is_relative_to(env / "lib")


_PROBE = (
    "import json, sys, triton_ort; "
    "print(json.dumps({'prefix': sys.prefix, 'triton_ort': triton_ort.__file__}))"
)
