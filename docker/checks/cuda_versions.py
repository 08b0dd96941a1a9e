"""Which CUDA a library was built with, and which CUDA runtime a file is, as NVIDIA's version rule needs.

NVIDIA's minor-version compatibility (CUDA Compatibility guide) lets an application built with CUDA 12.x
run on any 12.y driver, but the CUDA runtime and libraries it loads must be at least as new as the toolkit
it was built with (12.y >= 12.x). In the python-backend stub the runtime is fixed before any model code
runs: the stub links libcudart.so.12 itself, so torch and ONNX Runtime bind to that file.

- The runtime's version is in its file name: libcudart.so.12 -> libcudart.so.12.3.101.
- torch records its build in torch.version.cuda.
- onnxruntime-gpu records none (1.20.2 has no build_and_package_info.cuda_version), but its CUDA provider
  embeds PTX, whose `.version` line is the PTX ISA of the nvcc that compiled it: ISA 8.2 = CUDA 12.2.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

# PTX ISA version -> the CUDA toolkit release that introduced it (PTX ISA release notes).
PTX_ISA_TO_CUDA = {
    (7, 8): (11, 8),
    (8, 0): (12, 0),
    (8, 1): (12, 1),
    (8, 2): (12, 2),
    (8, 3): (12, 3),
    (8, 4): (12, 4),
    (8, 5): (12, 5),
    (8, 6): (12, 7),
    (8, 7): (12, 8),
    (8, 8): (12, 9),
    (9, 0): (13, 0),
}

# A PTX module header; fatbin compression leaves these first lines of each module readable.
# The CUDA runtime every model process of the 23.12 image runs on: the image's libcudart.so.12.3.101
# (release notes: CUDA 12.3.2), which the python-backend stub links itself (docs/docker.md, finding 2).
IMAGE_CUDA_RUNTIME = (12, 3)

_PTX_VERSION = re.compile(rb"\.version (\d+)\.(\d+)\s+\.target sm_")


def ptx_isa_versions(library: Path) -> set[tuple[int, int]]:
    """The PTX ISA versions of the PTX modules embedded in a shared library."""
    with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return {(int(m.group(1)), int(m.group(2))) for m in _PTX_VERSION.finditer(data)}


def built_with_cuda(library: Path) -> tuple[int, int] | None:
    """The CUDA toolkit the library's newest embedded PTX needs (None without readable PTX)."""
    isas = ptx_isa_versions(library)
    known = [PTX_ISA_TO_CUDA[isa] for isa in isas if isa in PTX_ISA_TO_CUDA]
    unknown = [isa for isa in isas if isa not in PTX_ISA_TO_CUDA and isa > max(PTX_ISA_TO_CUDA)]
    if unknown:
        return (99, 99)  # newer than this table knows: certainly not older than any runtime we have
    return max(known) if known else None


def runtime_version(libcudart: Path) -> tuple[int, int] | None:
    """(12, 3) for .../libcudart.so.12 -> libcudart.so.12.3.101 (the real file's name)."""
    # auditwheel-renamed copies (libcudart-d6d7c3a0.so.12.3.101, in nvidia-pytriton's wheel) count too
    match = re.search(r"libcudart(?:-[0-9a-f]+)?\.so\.(\d+)\.(\d+)", Path(libcudart).resolve().name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def major_minor(text: str | None) -> tuple[int, int] | None:
    """(12, 1) for torch.version.cuda == "12.1"."""
    try:
        release = Version(text or "").release
    except InvalidVersion:
        return None
    return (release[0], release[1] if len(release) > 1 else 0)


def show(version: tuple[int, int] | None) -> str:
    return "unknown" if version is None else f"{version[0]}.{version[1]}"
