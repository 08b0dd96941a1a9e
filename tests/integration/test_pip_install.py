"""`pip install '<checkout>[cpu,client,server]'` into a fresh venv, as the guide (docs/serving-your-model.md)
has a user do it on a CPU host, without torch (only GPU instances and hooks need it), then every command of
the installed `triton-ort` from a folder outside the checkout: serve the demo, health, infer, metadata,
served-config, the offline config (which names torch for a model with hooks), and backend install. An
import that no declared dependency or extra provides fails here (psutil did; torch would), and the
tritonserver release a pip user gets is the one pyproject pins and the guide names for this Python.

It needs a package index (nvidia-pytriton comes from one) and is skipped without it, naming pip's answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support.paths import MODEL_REPOSITORY, ROOT, demo_onnx
from tests.support.user_commands import activated, serving, shell
from triton_ort.harness.server import free_ports, gpu_present

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        gpu_present(),
        reason="the CPU stack's install; GPU hosts install onnxruntime-gpu (requirements-cuda.txt)",
    ),
]

EXTRAS = "cpu,client,server"
# pyproject's server extra pins nvidia-pytriton per Python; the guide says which tritonserver each gets.
PYTRITON, TRITONSERVER = ("0.5.0", "2.41.0") if sys.version_info < (3, 12) else ("0.7.0", "2.51.0")


@dataclass(frozen=True)
class Venv:
    prefix: Path
    env: dict[str, str]  # activated: its bin first on PATH, no PYTHONPATH
    workdir: Path  # a folder outside the checkout, where the commands run

    @property
    def python(self) -> str:
        return str(self.prefix / "bin" / "python")


def _pip(python: str, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _pip_error(done: subprocess.CompletedProcess[str]) -> str:
    """pip's own error lines, without the warnings of the index locations it skips."""
    lines = [line for line in done.stderr.splitlines() if line.strip() and "is ignored" not in line]
    return "\n".join(lines[-15:])


def _checkout_copy(target: Path) -> Path:
    """The checkout's files as git sees them (tracked, and untracked ones it does not ignore): pip builds
    a local folder in place, and its build/ and egg-info belong in the copy, not in the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.exists() or source.is_symlink():  # a tracked file deleted in the work tree is left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name, follow_symlinks=False)
    return target


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    root = tmp_path_factory.mktemp("pip_install")
    prefix = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=120)
    python = str(prefix / "bin" / "python")
    # A host without a package index cannot take this path at all (the GPU test host preinstalls its stack).
    probe = _pip(python, "install", "--dry-run", "--no-deps", "-q", f"nvidia-pytriton=={PYTRITON}")
    if probe.returncode != 0:
        pytest.skip(f"no package index with nvidia-pytriton {PYTRITON} here: {_pip_error(probe)[-300:]}")
    started = time.monotonic()
    checkout = _checkout_copy(root / "checkout")
    done = _pip(python, "install", "-q", "--no-compile", f"{checkout}[{EXTRAS}]")
    assert done.returncode == 0, _pip_error(done)
    print(f"\npip install: the checkout [{EXTRAS}] {time.monotonic() - started:.0f} s")  # shown with -s
    workdir = root / "elsewhere"
    workdir.mkdir()
    yield Venv(prefix, activated(prefix / "bin", prefix), workdir)


def test_the_venv_holds_the_declared_stack_and_nothing_broken(venv: Venv) -> None:
    checked = _pip(venv.python, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    no_torch = shell("python -c 'import torch'", venv.workdir, venv.env)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr, no_torch.stderr
    versions = shell(
        "python -c 'import importlib.metadata as m, numpy, triton_ort; "
        'print(m.version("nvidia-pytriton"), numpy.__version__, triton_ort.__file__)\'',
        venv.workdir,
        venv.env,
    )
    assert versions.returncode == 0, versions.stderr
    pytriton, numpy, module = versions.stdout.split()
    assert pytriton == PYTRITON  # what pyproject pins for this Python, and the guide says
    assert int(numpy.split(".")[0]) < 2  # the 23.12-24.10 stub breaks numpy outputs under numpy 2
    assert Path(module).is_relative_to(venv.prefix), module  # the installed package, not the checkout
    assert shell("command -v triton-ort", venv.workdir, venv.env).stdout.strip() == str(
        venv.prefix / "bin" / "triton-ort"
    )


def test_every_command_runs_from_the_installed_package(venv: Venv) -> None:
    demo_onnx()  # the demo repository's model file, built once per checkout (make models)
    config = shell(f"triton-ort config {MODEL_REPOSITORY / 'demo'}", venv.workdir, venv.env)
    assert config.returncode == 0, config.stderr
    assert text_format.Parse(config.stdout, model_config_pb2.ModelConfig()).name == "demo"
    # Hooks take torch tensors: without torch the hooks module itself fails to load, naming itself.
    hooked = shell(f"triton-ort config {MODEL_REPOSITORY / 'demo_hooks'}", venv.workdir, venv.env)
    assert hooked.returncode != 0 and "hooks.py failed to import" in hooked.stderr, hooked.stderr
    assert "No module named 'torch'" in hooked.stderr, hooked.stderr
    repository = venv.workdir / "repository"  # the demo alone: demo_hooks needs torch
    shutil.copytree(
        MODEL_REPOSITORY / "demo", repository / "demo", ignore=shutil.ignore_patterns("__pycache__")
    )

    backends = venv.workdir / "backends"
    backends.mkdir()
    installed = shell(f"triton-ort backend install --backend-directory {backends}", venv.workdir, venv.env)
    assert installed.returncode == 0, installed.stderr
    assert (backends / "onnxruntime_zerocopy" / "model.py").is_file()

    http, grpc, metrics = free_ports(3)
    serve = (
        f"triton-ort serve --model-repository {repository} "
        f"--http-port {http} --grpc-port {grpc} --metrics-port {metrics}"
    )
    log = venv.workdir / "serve.log"
    with serving(serve, venv.workdir, venv.env, http, log) as server:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2", timeout=10) as reply:
            assert json.load(reply)["version"] == TRITONSERVER  # the release the guide names for pip users

        def command(line: str) -> subprocess.CompletedProcess[str]:
            done = shell(line, venv.workdir, venv.env, timeout_s=120)
            assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
            return done

        assert "live: True  ready: True" in command(f"triton-ort health --url 127.0.0.1:{http}").stdout
        answer = command(f"triton-ort infer demo --url 127.0.0.1:{http} --batch 3").stdout
        assert answer.startswith("np_logits float32[3, 2]"), answer
        grpc_answer = command(f"triton-ort infer demo --protocol grpc --url 127.0.0.1:{grpc}").stdout
        assert grpc_answer.startswith("np_logits float32[1, 2]"), grpc_answer
        metadata = json.loads(command(f"triton-ort metadata demo --url 127.0.0.1:{http}").stdout)
        assert [tensor["name"] for tensor in metadata["inputs"]] == ["np_script_embeddings"]
        served = json.loads(command(f"triton-ort served-config demo --url 127.0.0.1:{http}").stdout)
        assert served["name"] == "demo"
    assert server.returncode == 0, log.read_text()[-3000:]  # stopped by its pid, as Ctrl-C stops it
