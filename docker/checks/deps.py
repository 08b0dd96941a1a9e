"""Opt-in, network-heavy check of the images' pinned Python stacks (`make docker-deps-check`).

1. pip's resolver, for the server image's interpreter (CPython 3.10, manylinux x86-64, glibc 2.35), resolves
   docker/requirements-gpu.txt to exactly the pinned set: nothing unpinned is pulled in, no CPU
   `onnxruntime` (or any other distribution of the `onnxruntime` module) next to onnxruntime-gpu, numpy < 2,
   and every wheel's Requires-Python admits 3.10. The same for docker/requirements-client.txt (CPython 3.11,
   the client image), where the CPU onnxruntime is expected and onnxruntime-gpu is not.
2. The wheels of onnxruntime-gpu and of the pinned nvidia-* packages are downloaded (cached in
   docker/.cache/) and libonnxruntime_providers_cuda.so is inspected: every soname it needs (and, through the
   pip libraries that satisfy it, every soname those need) is provided by the 23.12 image
   (docker/image-cuda-libs.txt, with sources) or by a pinned wheel; every symbol it imports from a pip
   library is defined there (so ORT's build of cuDNN/cuBLAS matches torch's); and its glibc/libstdc++ symbol
   versions exist on Ubuntu 22.04.

Needs PyPI (about 3 GB of wheels on the first run). Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from common import (
    CLIENT_REQUIREMENTS,
    DOCKER_DIR,
    GPU_REQUIREMENTS,
    MANIFEST,
    ORT_CPU,
    ORT_GPU,
    ORT_MODULE_DISTRIBUTIONS,
    ROOT,
    Manifest,
    Outcome,
    canonical,
    manylinux_platforms,
    pip_environment,
    python_ok,
    read_manifest,
    read_pins,
    version_tuple,
)
from cuda_versions import IMAGE_CUDA_RUNTIME, built_with_cuda, major_minor, show
from elfinfo import ElfInfo, read_elf
from fallback_libs import FALLBACK_LIBRARIES

PROVIDER = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
PROVIDER_BRIDGE = "onnxruntime/capi/libonnxruntime_providers_shared.so"
INDEX_URL = "https://pypi.org/simple"
# Unversioned imports with these prefixes must come from the CUDA libraries of the wheels.
CUDA_SYMBOL_PREFIXES = ("cuda", "__cuda", "cublas", "cufft", "curand", "cudnn", "nvrtc", "cusparse")


@dataclass(frozen=True)
class Target:
    """An image's interpreter, as pip's --python-version/--platform describe it."""

    label: str
    python: str  # "3.10"
    glibc_minor: int

    def pip_args(self) -> list[str]:
        abi = "cp" + self.python.replace(".", "")
        args = [
            "--python-version",
            self.python,
            "--implementation",
            "cp",
            "--abi",
            abi,
            "--only-binary=:all:",
        ]
        for platform in manylinux_platforms(self.glibc_minor):
            args += ["--platform", platform]
        return args


SERVER = Target("server image (tritonserver 23.12: CPython 3.10, Ubuntu 22.04 glibc 2.35)", "3.10", 35)
CLIENT = Target("client image (python:3.11-slim-bookworm: CPython 3.11, glibc 2.36)", "3.11", 36)


def run_pip(args: list[str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", *args]
    return subprocess.run(command, capture_output=True, text=True, env=pip_environment(), check=False)


def _requires_python_ok(spec: str | None, python: str) -> bool:
    if not spec:
        return True
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # pip always carries its own copy
        from pip._vendor.packaging.specifiers import SpecifierSet
    return bool(SpecifierSet(spec).contains(python + ".0", prereleases=True))


def resolve(requirements: Path, target: Target, outcome: Outcome, server: bool) -> dict[str, dict[str, Any]]:
    """pip install --dry-run --report for the target interpreter; the checks on what it would install."""
    shown = requirements.relative_to(ROOT) if requirements.is_relative_to(ROOT) else requirements
    print(f"\n== resolve {shown} for the {target.label}")
    pins, problems = read_pins(requirements)
    for problem in problems:
        outcome.fail(problem)
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        result = run_pip(
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report_path),
                "--index-url",
                INDEX_URL,
                "--target",
                str(Path(scratch) / "target"),
                *target.pip_args(),
                "-r",
                str(requirements),
            ]
        )
        if result.returncode != 0:
            outcome.fail(
                f"pip cannot resolve {requirements.name} for CPython {target.python}:\n"
                + (result.stderr.strip() or result.stdout.strip())
            )
            return {}
        report = json.loads(report_path.read_text())
    resolved = {canonical(item["metadata"]["name"]): item for item in report["install"]}
    outcome.ok(
        f"pip {report['pip_version']} resolves {len(resolved)} distributions for CPython {target.python}"
    )

    drift = []
    for name, item in sorted(resolved.items()):
        version = item["metadata"]["version"]
        if name not in pins:
            drift.append(f"{name}=={version} (unpinned, pulled in by a dependency)")
        elif pins[name].version != version:
            drift.append(f"{name}=={version} (pinned {pins[name].version})")
    unused = sorted(set(pins) - set(resolved))
    outcome.check(
        not drift and not unused,
        f"the resolution is exactly the {len(pins)} pins of {requirements.name}",
        f"{requirements.name} does not pin what pip installs: "
        f"{drift + [f'{n} pinned but not installed' for n in unused]}",
    )

    bad_python = [
        f"{name} {item['metadata']['version']} requires Python {item['metadata'].get('requires_python')}"
        for name, item in sorted(resolved.items())
        if not _requires_python_ok(item["metadata"].get("requires_python"), target.python)
    ]
    outcome.check(
        not bad_python,
        f"every wheel's Requires-Python admits {target.python}",
        f"wheels that CPython {target.python} cannot install: {bad_python}",
    )

    ort = sorted(name for name in resolved if ORT_MODULE_DISTRIBUTIONS.match(name))
    if server:
        outcome.check(
            ort == [ORT_GPU],
            f"{ORT_GPU} is the only distribution of the 'onnxruntime' module",
            f"distributions of the 'onnxruntime' module in the server image: {ort}; only {ORT_GPU} may be "
            f"there (the CPU '{ORT_CPU}' shadows it and the CUDA EP disappears)",
        )
        numpy = resolved.get("numpy", {}).get("metadata", {}).get("version", "0")
        outcome.check(
            version_tuple(numpy)[:1] < (2,),
            f"numpy {numpy} < 2 (23.12 stub)",
            f"numpy {numpy}: the 23.12 python-backend stub needs numpy < 2",
        )
    else:
        outcome.check(
            ORT_GPU not in ort and ORT_CPU in ort,
            f"the client uses the CPU {ORT_CPU} only",
            f"client's onnxruntime distributions: {ort}",
        )
    return resolved


def download(
    resolved: dict[str, dict[str, Any]], names: list[str], cache: Path, outcome: Outcome
) -> dict[str, Path]:
    """The wheels of `names` at their resolved versions, from PyPI into the cache (reused when present)."""
    cache.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}=={resolved[name]['metadata']['version']}" for name in names]
    print(f"\n== download {len(specs)} wheels into {cache} (cached)")
    result = run_pip(
        [
            "download",
            "--no-deps",
            "--quiet",
            "--index-url",
            INDEX_URL,
            "-d",
            str(cache),
            *SERVER.pip_args(),
            *specs,
        ]
    )
    if result.returncode != 0:
        outcome.fail("pip download failed:\n" + (result.stderr.strip() or result.stdout.strip()))
        return {}
    wheels = {}
    for name in names:
        url = resolved[name]["download_info"]["url"]
        path = cache / PurePosixPath(url).name
        if path.is_file():
            wheels[name] = path
        else:
            outcome.fail(f"{path.name} not found after download")
    outcome.ok(
        f"{len(wheels)} wheels present ({sum(p.stat().st_size for p in wheels.values()) / 2**30:.1f} GiB)"
    )
    return wheels


class WheelLibraries:
    """The shared libraries inside a set of wheels, by file name (which is the soname for nvidia-* wheels)."""

    def __init__(self, wheels: dict[str, Path], extract_dir: Path) -> None:
        self.extract_dir = extract_dir
        self.members: dict[str, list[tuple[str, Path, str]]] = {}  # soname -> [(dist, wheel, member)]
        for dist, wheel in wheels.items():
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    name = PurePosixPath(member).name
                    if ".so" in name and not member.endswith("/"):
                        self.members.setdefault(name, []).append((dist, wheel, member))

    def providers(self, soname: str) -> list[str]:
        return sorted({dist for dist, _, _ in self.members.get(soname, [])})

    def folder(self, soname: str) -> str:
        """The library's folder inside site-packages, e.g. nvidia/cublas/lib."""
        return posixpath.dirname(self.members[soname][0][2])

    def extract(self, soname: str) -> Path:
        _dist, wheel, member = self.members[soname][0]
        target = self.extract_dir / wheel.stem / member
        if not target.is_file() or target.stat().st_size == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target, "wb") as out:
                while chunk := source.read(1 << 22):
                    out.write(chunk)
        return target


TORCH_LIBRARIES = ("libtorch_global_deps.so", "libc10_cuda.so", "libtorch_cuda.so")


def torch_loaded_sonames(torch_wheel: Path, libraries: WheelLibraries, extract_dir: Path) -> set[str]:
    """The pip CUDA sonames `import torch` loads: libtorch's NEEDED found through its RPATH, and theirs."""
    torch = WheelLibraries({"torch": torch_wheel}, extract_dir)
    loaded: set[str] = set()
    queue: list[tuple[ElfInfo, str]] = []
    for name in TORCH_LIBRARIES:
        if name in torch.members:
            queue.append((read_elf(torch.extract(name)), torch.folder(name)))
    while queue:
        info, folder = queue.pop(0)
        search = {posixpath.normpath(p.replace("$ORIGIN", folder)) for p in info.rpath + info.runpath}
        for needed in info.needed:
            if needed in loaded or needed not in libraries.members or libraries.folder(needed) not in search:
                continue
            loaded.add(needed)
            queue.append((read_elf(libraries.extract(needed)), libraries.folder(needed)))
    return loaded


def _describe(soname: str, pip: list[str], how: str | None, manifest: Manifest) -> str:
    where = []
    if pip:
        where.append(f"pip {','.join(pip)} ({how or 'nothing loads it'})")
    if soname in manifest.libs:
        directory, sources = manifest.libs[soname]
        where.append(f"image {directory} [{sources}]")
    return "; ".join(where)


def check_provider(
    ort_wheel: Path,
    torch_wheel: Path,
    pip_wheels: dict[str, Path],
    manifest: Manifest,
    extract_dir: Path,
    outcome: Outcome,
) -> None:
    print(f"\n== {PROVIDER} from {ort_wheel.name}")
    libraries = WheelLibraries(pip_wheels, extract_dir)
    ort = WheelLibraries({ORT_GPU: ort_wheel}, extract_dir)
    provider_file = ort.extract(PurePosixPath(PROVIDER).name)
    provider = read_elf(provider_file)
    built = built_with_cuda(provider_file)
    outcome.check(
        built is not None and built <= IMAGE_CUDA_RUNTIME,
        f"ORT's CUDA provider is built for CUDA {show(built)} (newest embedded PTX) <= the stub's runtime "
        f"{show(IMAGE_CUDA_RUNTIME)}",
        f"ORT's CUDA provider is built for CUDA {show(built)}; the stub runs on the image's "
        f"{show(IMAGE_CUDA_RUNTIME)} runtime (NVIDIA's minor-version rule needs runtime >= build)",
    )
    bridge = read_elf(ort.extract(PurePosixPath(PROVIDER_BRIDGE).name))
    by_torch = torch_loaded_sonames(torch_wheel, libraries, extract_dir)

    def loaded_how(soname: str) -> str | None:
        """How a pip copy gets into the model process, if anything loads it."""
        if soname in by_torch:
            return "loaded by import torch"
        if libraries.providers(soname) == ["nvidia-cudnn-cu12"]:
            return "cuDNN folder: LD_LIBRARY_PATH + triton_ort preload"
        if soname in FALLBACK_LIBRARIES:
            return "linked by fallback_libs.py only if the image lacks it"
        return None

    # Soname closure: the provider's NEEDED, then the NEEDED of every pip library that satisfies one.
    seen: dict[str, ElfInfo | None] = {}
    missing: list[str] = []
    queue = [(soname, PurePosixPath(PROVIDER).name) for soname in provider.needed]
    print(f"  {'soname':40} {'needed by':34} provided by")
    while queue:
        soname, parent = queue.pop(0)
        if soname in seen:
            continue
        pip = libraries.providers(soname)
        how = loaded_how(soname) if pip else None
        print(f"  {soname:40} {parent:34} {_describe(soname, pip, how, manifest) or 'NOTHING'}")
        if soname not in manifest.libs and not how:
            if soname in manifest.absent:
                missing.append(f"{soname} (needed by {parent}; the image has {manifest.absent[soname]})")
            elif pip:
                missing.append(
                    f"{soname} (needed by {parent}; in {pip} but nothing puts it on the load path)"
                )
            else:
                missing.append(f"{soname} (needed by {parent})")
        if pip:
            info = read_elf(libraries.extract(soname))
            seen[soname] = info
            queue += [(needed, soname) for needed in info.needed]
        else:
            seen[soname] = None
    outcome.check(
        not missing,
        f"every soname in the provider's closure ({len(seen)}) is in the 23.12 image or loaded from a pinned "
        "wheel",
        f"not loadable in the model process: {missing}",
    )
    cudnn = sorted(s for s in seen if s.startswith("libcudnn"))
    sources = {s: libraries.providers(s) for s in cudnn}
    ambiguous = {s: p for s, p in sources.items() if len(p) > 1}
    outcome.check(
        not ambiguous,
        f"cuDNN for the provider: {', '.join(cudnn)} from "
        f"{sorted({p for ps in sources.values() for p in ps} or {'the image'})}",
        f"cuDNN libraries in several wheels: {ambiguous}",
    )

    # Symbols: what the provider imports must be defined by the pip libraries it will bind to (torch loads
    # these first in the model process) or by ORT's provider bridge; glibc/libstdc++ ones are versioned.
    pip_infos = {s: i for s, i in seen.items() if i is not None}
    defined = set(bridge.defined)
    for info in pip_infos.values():
        defined |= info.defined
    system_families = tuple(manifest.symvers)
    unresolved = []
    image_only = []
    unprovided = {entry.split(" ", 1)[0] for entry in missing}
    for symbol, version in sorted(provider.undefined.items()):
        if version and (version.startswith(system_families) or version in unprovided):
            continue  # glibc/libstdc++ (checked below), or a library already reported as missing
        if symbol in defined:
            continue
        if version and version in manifest.libs and version not in pip_infos:
            image_only.append(f"{symbol}@{version}")
        elif version or symbol.startswith(CUDA_SYMBOL_PREFIXES):
            unresolved.append(f"{symbol}@{version}" if version else symbol)
        # else: an unversioned libc/libdl symbol (older glibc links), not ours to find in the wheels
    for soname, info in sorted(pip_infos.items()):
        for symbol, version in sorted(info.undefined.items()):
            if version and version.startswith(system_families):
                continue
            if version in pip_infos and symbol not in pip_infos[version].defined:
                unresolved.append(f"{soname}: {symbol}@{version}")
    imported = len(provider.undefined)
    outcome.check(
        not unresolved,
        f"all {imported} symbols the provider imports are defined by the pinned wheels' libraries "
        f"(cuDNN {', '.join(sorted({v for v in provider.undefined.values() if v and 'cudnn' in v}))}, "
        f"cuBLAS, cudart, cuFFT) or by ORT's provider bridge",
        f"undefined symbols (ORT built against newer libraries than the pins?): {unresolved[:20]}",
    )
    if image_only:
        print(
            f"  note: {len(image_only)} symbols come from libraries only the image provides (not inspected)"
        )

    too_new = []
    for info in [provider, *pip_infos.values()]:
        for file, versions in info.version_needs.items():
            for version in versions:
                family = next((f for f in manifest.symvers if version.startswith(f + "_")), None)
                if family and version_tuple(version[len(family) + 1 :]) > manifest.symvers[family]:
                    too_new.append(f"{info.path.name} needs {version} from {file}")
    ceilings = ", ".join(f"{f}_{'.'.join(map(str, v))}" for f, v in manifest.symvers.items())
    outcome.check(
        not too_new,
        f"glibc/libstdc++ symbol versions are within Ubuntu 22.04's ({ceilings})",
        f"newer than Ubuntu 22.04 provides: {sorted(set(too_new))}",
    )

    both = sorted(s for s in seen if libraries.providers(s) and s in manifest.libs)
    if both:
        print(
            "  note: in both the image and pip: "
            + ", ".join(both)
            + ". In the model process torch is imported"
            " first and its RPATH loads the pip copies it needs; ORT's provider then binds to those sonames."
        )


def main() -> int:
    python_ok()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requirements", type=Path, default=GPU_REQUIREMENTS)
    parser.add_argument("--client-requirements", type=Path, default=CLIENT_REQUIREMENTS)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--cache", type=Path, default=DOCKER_DIR / ".cache")
    parser.add_argument("--no-client", action="store_true", help="skip the client image's resolution")
    args = parser.parse_args()
    outcome = Outcome()

    manifest, problems = read_manifest(args.manifest)
    for problem in problems:
        outcome.fail(problem)

    resolved = resolve(args.requirements.resolve(), SERVER, outcome, server=True)
    if not args.no_client:
        resolve(args.client_requirements.resolve(), CLIENT, outcome, server=False)
    if ORT_GPU not in resolved:
        return outcome.finish("docker deps check")

    cudart = resolved.get("nvidia-cuda-runtime-cu12", {}).get("metadata", {}).get("version")
    torch_cuda = major_minor(cudart)
    outcome.check(
        torch_cuda is not None and torch_cuda <= IMAGE_CUDA_RUNTIME,
        f"torch is built for CUDA {show(torch_cuda)} (its nvidia-cuda-runtime-cu12 pin) <= the stub's "
        f"runtime {show(IMAGE_CUDA_RUNTIME)}",
        f"torch is built for CUDA {show(torch_cuda)}, newer than the stub's {show(IMAGE_CUDA_RUNTIME)} "
        "runtime",
    )
    native = [ORT_GPU, "torch", *sorted(n for n in resolved if n.startswith("nvidia-"))]
    wheels = download(resolved, [n for n in native if n in resolved], args.cache / "wheels", outcome)
    if ORT_GPU in wheels and "torch" in wheels:
        pip_wheels = {name: path for name, path in wheels.items() if name.startswith("nvidia-")}
        check_provider(
            wheels[ORT_GPU], wheels["torch"], pip_wheels, manifest, args.cache / "extracted", outcome
        )
    else:
        outcome.fail("onnxruntime-gpu and torch wheels are needed for the library checks")
    return outcome.finish("docker deps check")


if __name__ == "__main__":
    sys.exit(main())
