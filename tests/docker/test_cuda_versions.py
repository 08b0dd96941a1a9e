"""docs/docker.md finding 2: which CUDA runtime the python-backend stub runs every model on, and what the
image's torch and ORT builds need (docker/checks/cuda_versions.py, used by the image self-check)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_versions import IMAGE_CUDA_RUNTIME, built_with_cuda, major_minor, ptx_isa_versions, runtime_version
from elfinfo import read_elf


def test_runtime_versions_come_from_the_real_file_name(tmp_path: Path) -> None:
    real = tmp_path / "libcudart.so.12.3.101"
    real.touch()
    (tmp_path / "libcudart.so.12").symlink_to(real.name)
    assert runtime_version(tmp_path / "libcudart.so.12") == (12, 3)
    assert runtime_version(Path("/x/libcudart-c64a25f3.so.12.3.101")) == (12, 3)
    assert major_minor("12.1") == (12, 1)
    assert major_minor(None) is None


def test_the_newest_embedded_ptx_names_the_build_toolkit(tmp_path: Path) -> None:
    library = tmp_path / "libx.so"
    library.write_bytes(
        b"\0\x13\n\xf2.version 8.1\n.target sm_52\n\0junk .version 9.9 text\0.version 8.2\n.target sm_80\n"
    )
    assert ptx_isa_versions(library) == {(8, 1), (8, 2)}
    built = built_with_cuda(library)
    assert built == (12, 2)
    assert built <= IMAGE_CUDA_RUNTIME


def test_the_23_12_stub_links_the_cuda_12_3_runtime_itself() -> None:
    """nvidia-pytriton 0.5.0 carries tritonserver 2.41.0 (= 23.12); its stub's NEEDED libcudart is 12.3.101,
    so that runtime is in the process before any model code imports torch or onnxruntime."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pytriton_version = version("nvidia-pytriton")
    except PackageNotFoundError:
        pytest.skip("nvidia-pytriton is not installed")
    if pytriton_version != "0.5.0":
        pytest.skip(f"nvidia-pytriton {pytriton_version} does not carry the 23.12 stub")
    import pytriton

    stubs = sorted(Path(pytriton.__file__).parent.glob("tritonserver/python_backend_stubs/3.*/*_stub"))
    assert stubs, "no python-backend stub in nvidia-pytriton 0.5.0?"
    for stub in stubs:
        cudart = [n for n in read_elf(stub).needed if n.startswith("libcudart")]
        assert len(cudart) == 1, (stub, read_elf(stub).needed)
        assert runtime_version(Path(cudart[0])) == IMAGE_CUDA_RUNTIME, cudart
