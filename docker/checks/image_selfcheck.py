"""Build-time proof, inside the server image, that ONNX Runtime's CUDA EP can load there. No GPU is needed.

Run by docker/Dockerfile after the pinned stack is installed; any failure fails `docker build` with the
reason. It checks, in order:

1. no CPU-only ONNX Runtime distribution is installed: `onnxruntime-gpu` (at the pinned version) must be the
   only distribution that provides the `onnxruntime` module, and `import onnxruntime` must load its files;
2. that build reports get_device() == "GPU" and lists CUDAExecutionProvider;
3. `ldd` of capi/libonnxruntime_providers_cuda.so finds every library (nothing "not found"), cuDNN 9 from
   the pip nvidia-cudnn-cu12 folder;
4. `ldd -r` binds every symbol of the provider (with ORT's provider bridge preloaded, as ORT does), both
   with the image's CUDA 12.3 libraries and in the model process's order, where `import torch` has loaded
   pip's CUDA 12.4 libraries first (found from libtorch's RPATH). ldd runs no initialisers, so this is
   safe without a GPU driver.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from elfinfo import read_elf
from ort_loading import describe, entrypoint_environment, probe

GPU_DIST = "onnxruntime-gpu"
PROVIDER = "libonnxruntime_providers_cuda.so"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_version(requirements: Path, name: str) -> str | None:
    for line in requirements.read_text().splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*==\s*([^\s;#]+)", line)
        if match and canonical(match.group(1)) == canonical(name):
            return match.group(3)
    return None


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def ok(self, message: str) -> None:
        print(f"  ok    {message}")

    def fail(self, message: str) -> None:
        print(f"  FAIL  {message}")
        self.failures.append(message)


def module_owners(module: str) -> dict[str, md.Distribution]:
    """Installed distributions whose files include <module>/__init__.py."""
    owners = {}
    for dist in md.distributions():
        for file in dist.files or []:
            if file.parts[:1] == (module,) and file.name == "__init__.py" and len(file.parts) == 2:
                owners[canonical(dist.metadata["Name"] or "?")] = dist
                break
    return owners


def check_distributions(report: Report, requirements: Path) -> Path | None:
    owners = module_owners("onnxruntime")
    others = sorted(set(owners) - {GPU_DIST})
    if others:
        report.fail(
            f"the module 'onnxruntime' is also installed by {others}; they shadow {GPU_DIST}. "
            f"Remove them (never install the CPU 'onnxruntime' in this image)"
        )
    else:
        report.ok(f"only {GPU_DIST} provides the module 'onnxruntime'")
    try:
        md.distribution("onnxruntime")
        report.fail("the CPU distribution 'onnxruntime' is installed")
    except md.PackageNotFoundError:
        report.ok("the CPU distribution 'onnxruntime' is not installed")
    if GPU_DIST not in owners:
        report.fail(f"{GPU_DIST} is not installed")
        return None
    gpu = owners[GPU_DIST]
    want = pinned_version(requirements, GPU_DIST)
    if want and gpu.version != want:
        report.fail(f"{GPU_DIST} {gpu.version} is installed, {requirements} pins {want}")
    else:
        report.ok(f"{GPU_DIST}=={gpu.version} (pinned {want})")
    return Path(str(gpu.locate_file("onnxruntime"))).resolve()


def check_import(report: Report, gpu_dir: Path) -> Path | None:
    import onnxruntime as ort

    module_dir = Path(ort.__file__).resolve().parent
    if module_dir != gpu_dir:
        report.fail(f"import onnxruntime loads {module_dir}, not {GPU_DIST}'s {gpu_dir}")
    else:
        report.ok(f"import onnxruntime -> {module_dir} ({ort.__version__})")
    device = ort.get_device()
    providers = ort.get_available_providers()
    if device != "GPU" or "CUDAExecutionProvider" not in providers:
        report.fail(f"a CPU-only ONNX Runtime build: get_device()={device!r}, providers={providers}")
    else:
        report.ok(f"get_device()={device!r}, available providers {providers}")
    provider = module_dir / "capi" / PROVIDER
    if not provider.is_file():
        report.fail(f"{provider} is missing")
        return None
    return provider


def check_ldd(report: Report, provider: Path) -> None:
    result = subprocess.run(["ldd", str(provider)], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    missing = [line for line in lines if "not found" in line]
    for line in lines:
        print(f"        {line}")
    if result.returncode != 0 or missing:
        report.fail(
            f"ldd {provider.name}: not found in the image: {missing or result.stderr.strip()}. "
            "LD_LIBRARY_PATH=" + os.environ.get("LD_LIBRARY_PATH", "")
        )
        return
    cudnn = [line for line in lines if line.startswith("libcudnn")]
    outside = [line for line in cudnn if "/nvidia/cudnn/lib/" not in line]
    if outside:
        report.fail(f"cuDNN 9 resolves outside the pip nvidia-cudnn-cu12 folder: {outside}")
    else:
        report.ok(f"ldd {PROVIDER}: all {len(lines)} libraries found, cuDNN 9 from nvidia-cudnn-cu12")


def torch_library_dirs() -> list[str]:
    """The pip nvidia-* folders whose libraries `import torch` loads (through libtorch's RPATH), in order."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return []
    torch_lib = Path(spec.origin).parent / "lib"
    queue = [torch_lib / name for name in ("libtorch_global_deps.so", "libc10_cuda.so", "libtorch_cuda.so")]
    seen: set[Path] = set()
    folders: list[str] = []
    while queue:
        library = queue.pop(0)
        if library in seen or not library.is_file():
            continue
        seen.add(library)
        info = read_elf(library)
        search = [p.replace("$ORIGIN", str(library.parent)) for p in info.rpath + info.runpath]
        for needed in info.needed:
            for folder in search:
                candidate = Path(folder) / needed
                if candidate.is_file():
                    resolved = str(Path(folder).resolve())
                    if "/nvidia/" in resolved and resolved not in folders:
                        folders.append(resolved)
                    queue.append(candidate)
                    break
    return folders


def ldd_relocate(provider: Path, library_path: str) -> tuple[list[str], list[str]]:
    """`ldd -r` (all symbols bound, no initialisers run: safe without a driver) -> (missing, undefined)."""
    bridge = provider.parent / "libonnxruntime_providers_shared.so"
    env = dict(os.environ, LD_LIBRARY_PATH=library_path)
    # ORT loads its provider bridge globally before any provider; Provider_GetHost comes from it.
    env["LD_PRELOAD"] = str(bridge)
    result = subprocess.run(
        ["ldd", "-r", str(provider)], capture_output=True, text=True, env=env, check=False
    )
    output = (result.stdout + result.stderr).splitlines()
    missing = [line.strip() for line in output if "not found" in line]
    undefined = [line.strip() for line in output if line.startswith("undefined symbol")]
    return missing, undefined


def check_binding(report: Report, provider: Path) -> None:
    """Every symbol of the provider binds, with the image's CUDA 12.3 libraries and with torch's CUDA 12.4.

    A real dlopen() is not an option here: without libcuda.so.1 (no driver during `docker build`) the
    provider's static initialisers crash (seen with onnxruntime-gpu 1.20.2 on a driverless machine).
    """
    image_path = os.environ.get("LD_LIBRARY_PATH", "")
    torch_dirs = torch_library_dirs()
    orders = {
        "ORT alone (the image's CUDA libraries)": image_path,
        "model process (torch's pip CUDA libraries first)": ":".join([*torch_dirs, image_path]),
    }
    for label, library_path in orders.items():
        missing, undefined = ldd_relocate(provider, library_path)
        if missing or undefined:
            report.fail(f"ldd -r {PROVIDER} [{label}]: {missing + undefined[:10]}")
        else:
            report.ok(f"ldd -r {PROVIDER} [{label}]: every library found, every symbol bound")
    if torch_dirs:
        print(
            "        torch loads its CUDA libraries from: "
            + ", ".join(Path(d).parent.name for d in torch_dirs)
        )


def check_loaded_libraries(report: Report, entrypoint: Path, model_repository: Path) -> dict[str, str]:
    """Finding 1: in the environment the entrypoint starts tritonserver with (the stub inherits it),
    `import onnxruntime` and a CUDA-EP session attempt load no libonnxruntime* file outside
    onnxruntime/capi. Returns that environment."""
    try:
        env = entrypoint_environment(entrypoint, os.environ, model_repository)
    except RuntimeError as error:
        report.fail(str(error))
        return dict(os.environ)
    library_path = env.get("LD_LIBRARY_PATH", "")
    print(f"        entrypoint's LD_LIBRARY_PATH={library_path}")
    result = probe(env)
    if result.foreign:
        report.fail(
            f"onnxruntime loads another build's libraries: {result.foreign}. Triton's ORT backend folder "
            f"(or another folder holding libonnxruntime*) is on LD_LIBRARY_PATH={library_path}. "
            f"{describe(result)}"
        )
    elif result.capi is None and not result.opened:
        report.fail(f"the onnxruntime probe did not run: {result.output}")
    else:
        report.ok(
            "after import onnxruntime and a CUDA-EP session attempt, every libonnxruntime* file loaded "
            f"is in {result.capi} ({describe(result)})"
        )
    return env


def check_numpy(report: Report) -> None:
    import numpy

    major = int(numpy.__version__.split(".")[0])
    if major >= 2:
        report.fail(f"numpy {numpy.__version__}: the 23.12 python-backend stub needs numpy < 2")
    else:
        report.ok(f"numpy {numpy.__version__} (< 2)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requirements", type=Path, required=True, help="docker/requirements-gpu.txt")
    parser.add_argument("--entrypoint", type=Path, required=True, help="/opt/triton-ort/entrypoint.sh")
    parser.add_argument("--model-repository", type=Path, default=Path("/models"))
    args = parser.parse_args()
    report = Report()
    print("image self-check: ONNX Runtime CUDA EP loadability")
    gpu_dir = check_distributions(report, args.requirements)
    provider = check_import(report, gpu_dir) if gpu_dir else None
    env = check_loaded_libraries(report, args.entrypoint, args.model_repository)
    # The library checks below look at the process tritonserver starts, not at `docker build`'s.
    os.environ["LD_LIBRARY_PATH"] = env.get("LD_LIBRARY_PATH", "")
    if provider:
        check_ldd(report, provider)
        check_binding(report, provider)
    check_numpy(report)
    if report.failures:
        print(f"image self-check FAILED ({len(report.failures)}):", *report.failures, sep="\n  - ")
        return 1
    print("image self-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
