"""Build-time proof, inside the server image, that ONNX Runtime's CUDA EP can load there. No GPU is needed.

Run by docker/Dockerfile after the pinned stack is installed; any failure fails `docker build` with the
reason. It checks, in order:

1. no CPU-only ONNX Runtime distribution is installed: `onnxruntime-gpu` (at the pinned version) must be the
   only distribution that provides the `onnxruntime` module, and `import onnxruntime` must load its files;
2. that build reports get_device() == "GPU" and lists CUDAExecutionProvider;
3. in the environment the entrypoint starts tritonserver with (the stub inherits it): after
   `import onnxruntime` and a CUDA-EP session attempt, no libonnxruntime* file outside onnxruntime/capi is
   loaded (docs/docker.md, finding 1), and Triton's native ORT backend still finds its libraries;
4. the CUDA runtime the stub really runs on: the python-backend stub links libcudart.so.12 itself, so
   torch and ORT bind to the image's copy. Its version must be at least the CUDA torch and ORT's CUDA
   provider were built with (torch.version.cuda; the provider's newest embedded PTX ISA);
5. `ldd` of capi/libonnxruntime_providers_cuda.so finds every library (nothing "not found"), cuDNN 9 from
   the pip nvidia-cudnn-cu12 folder;
6. `ldd -r` binds every symbol of the provider (with ORT's provider bridge preloaded, as ORT does), both
   with the image's CUDA libraries alone and in the stub's order: the stub's own libcudart first, then
   the pip nvidia-* libraries `import torch` loads through libtorch's RPATH, then the image's. ldd runs no
   initialisers, so this is safe without a GPU driver.
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

from common import canonical, read_pins
from cuda_versions import built_with_cuda, major_minor, runtime_version, show
from elfinfo import read_elf
from ort_loading import describe, entrypoint_environment, probe

GPU_DIST = "onnxruntime-gpu"
PROVIDER = "libonnxruntime_providers_cuda.so"


STUB = Path("/opt/tritonserver/backends/python/triton_python_backend_stub")
TRITON_ORT_BACKEND = Path("/opt/tritonserver/backends/onnxruntime/libtriton_onnxruntime.so")


def pinned_version(requirements: Path, name: str) -> str | None:
    pins, _ = read_pins(requirements)
    pin = pins.get(canonical(name))
    return pin.version if pin else None


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


def check_cpu_distribution(report: Report, requirements: Path) -> None:
    """The CPU stack (a base without CUDA, e.g. the stand-in): the pinned CPU build owns the module alone."""
    owners = module_owners("onnxruntime")
    want = pinned_version(requirements, "onnxruntime")
    if set(owners) != {"onnxruntime"}:
        report.fail(f"the module 'onnxruntime' is installed by {sorted(owners)}, not 'onnxruntime' alone")
    elif want and owners["onnxruntime"].version != want:
        report.fail(f"onnxruntime {owners['onnxruntime'].version} is installed, {requirements} pins {want}")
    else:
        report.ok(f"only onnxruntime=={want} (CPU stack) provides the module 'onnxruntime'")


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


def ldd_relocate(provider: Path, library_path: str, preload: list[str]) -> tuple[list[str], list[str]]:
    """`ldd -r` (all symbols bound, no initialisers run: safe without a driver) -> (missing, undefined).
    `preload`: libraries already in the process before ORT (the stub's own libcudart)."""
    bridge = provider.parent / "libonnxruntime_providers_shared.so"
    env = dict(os.environ, LD_LIBRARY_PATH=library_path)
    # ORT loads its provider bridge globally before any provider; Provider_GetHost comes from it.
    env["LD_PRELOAD"] = " ".join([*preload, str(bridge)])
    result = subprocess.run(
        ["ldd", "-r", str(provider)], capture_output=True, text=True, env=env, check=False
    )
    output = (result.stdout + result.stderr).splitlines()
    missing = [line.strip() for line in output if "not found" in line]
    undefined = [line.strip() for line in output if line.startswith("undefined symbol")]
    return missing, undefined


def ldd_paths(binary: Path) -> dict[str, str]:
    """soname -> the file `ldd` resolves it to, in this process's LD_LIBRARY_PATH."""
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    found = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\s*(\S+) => (/\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def check_cuda_runtime(report: Report, provider: Path, stub: Path) -> str | None:
    """The CUDA runtime the stub loads, against what torch and ORT's provider were built with. Returns the
    path of the stub's libcudart (None when it could not be found)."""
    if not stub.is_file():
        report.fail(f"{stub} is missing: is this a tritonserver image with the python backend?")
        return None
    needed = [n for n in read_elf(stub).needed if n.startswith("libcudart")]
    if not needed:
        report.fail(f"{stub.name} does not link libcudart: the runtime below is not fixed by the stub")
        return None
    cudart = ldd_paths(stub).get(needed[0])
    runtime = runtime_version(Path(cudart)) if cudart else None
    if cudart is None or runtime is None:
        report.fail(
            f"{stub.name} needs {needed[0]}, which ldd resolves to {cudart!r} (no version in its name)"
        )
        return cudart
    import torch

    builds = {
        f"torch {torch.__version__}": major_minor(torch.version.cuda),
        f"ORT's {PROVIDER}": built_with_cuda(provider),
    }
    for what, built in builds.items():
        if built is None:
            report.fail(f"cannot tell which CUDA {what} was built with; check it by hand before shipping")
        elif built > runtime:
            report.fail(
                f"{what} is built for CUDA {show(built)}, but the stub runs every model on the image's CUDA "
                f"{show(runtime)} runtime ({Path(cudart).resolve()}): outside NVIDIA's minor-version "
                "compatibility. Pick builds for CUDA <= the image's runtime (docs/docker.md)"
            )
        else:
            report.ok(
                f"{what}: built for CUDA {show(built)} <= the stub's runtime {show(runtime)} "
                f"({Path(cudart).resolve()})"
            )
    return cudart


def check_native_backend(report: Report, backend: Path) -> None:
    """Triton's own ORT backend, with its folder off LD_LIBRARY_PATH, still resolves ORT 1.16.3."""
    if not backend.is_file():
        report.ok(f"{backend} is not in this image (nothing to check)")
        return
    result = subprocess.run(["ldd", str(backend)], capture_output=True, text=True, check=False)
    missing = [line.strip() for line in result.stdout.splitlines() if "not found" in line]
    ort = [line.strip() for line in result.stdout.splitlines() if "libonnxruntime" in line]
    if missing or not ort:
        report.fail(f"{backend.name} without its folder on LD_LIBRARY_PATH: {missing or result.stdout}")
        return
    report.ok(f"{backend.name} finds its own ORT through RUNPATH {read_elf(backend).runpath}: {ort}")


def check_binding(report: Report, provider: Path, stub_cudart: str | None) -> None:
    """Every symbol of the provider binds, with the image's CUDA libraries, and in the stub's order.

    A real dlopen() is not an option here: without libcuda.so.1 (no driver during `docker build`) the
    provider's static initialisers crash (seen with onnxruntime-gpu 1.20.2 on a driverless machine).
    """
    image_path = os.environ.get("LD_LIBRARY_PATH", "")
    torch_dirs = torch_library_dirs()
    orders = {
        "ORT alone (the image's CUDA libraries)": (image_path, []),
        "model process (the stub's libcudart, then torch's pip CUDA libraries, then the image's)": (
            ":".join([*torch_dirs, image_path]),
            [stub_cudart] if stub_cudart else [],
        ),
    }
    for label, (library_path, preload) in orders.items():
        missing, undefined = ldd_relocate(provider, library_path, preload)
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
    parser.add_argument("--stub", type=Path, default=STUB)
    args = parser.parse_args()
    report = Report()
    print("image self-check: ONNX Runtime CUDA EP loadability")
    provider = None
    if pinned_version(args.requirements, GPU_DIST) is None:
        # No CUDA in the base: only the library path and numpy can be proven here.
        print(f"  {args.requirements} pins no {GPU_DIST}: CPU stack, the CUDA checks are skipped")
        check_cpu_distribution(report, args.requirements)
    else:
        gpu_dir = check_distributions(report, args.requirements)
        provider = check_import(report, gpu_dir) if gpu_dir else None
    env = check_loaded_libraries(report, args.entrypoint, args.model_repository)
    # The library checks below look at the process tritonserver starts, not at `docker build`'s.
    os.environ["LD_LIBRARY_PATH"] = env.get("LD_LIBRARY_PATH", "")
    check_native_backend(report, TRITON_ORT_BACKEND)
    if provider:
        stub_cudart = check_cuda_runtime(report, provider, args.stub)
        check_ldd(report, provider)
        check_binding(report, provider, stub_cudart)
    check_numpy(report)
    if report.failures:
        print(f"image self-check FAILED ({len(report.failures)}):", *report.failures, sep="\n  - ")
        return 1
    print("image self-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
