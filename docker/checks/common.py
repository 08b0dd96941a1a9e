"""What docker/checks/lint.py and deps.py share: paths, requirement pins, the image library manifest."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_DIR = Path(__file__).resolve().parent.parent
ROOT = DOCKER_DIR.parent
GPU_REQUIREMENTS = DOCKER_DIR / "requirements-gpu.txt"
CLIENT_REQUIREMENTS = DOCKER_DIR / "requirements-client.txt"
MANIFEST = DOCKER_DIR / "image-cuda-libs.txt"

# Distributions that install the `onnxruntime` module. Only onnxruntime-gpu may be in the server image.
ORT_MODULE_DISTRIBUTIONS = re.compile(r"^(onnxruntime(-.*)?|ort-nightly(-.*)?)$")
ORT_GPU = "onnxruntime-gpu"
ORT_CPU = "onnxruntime"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)(\[[^\]]*\])?\s*==\s*([A-Za-z0-9_.!+\-]+)\s*$")


def canonical(name: str) -> str:
    """PEP 503 name normalisation: Jinja2 -> jinja2, zope.event -> zope-event."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    extras: str
    line_number: int


def read_pins(path: Path) -> tuple[dict[str, Pin], list[str]]:
    """The `name==version` lines of a requirements file, and a problem for every other requirement line."""
    pins: dict[str, Pin] = {}
    problems = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if not match:
            problems.append(f"{path.name}:{number}: not an exact pin (name==version): {raw.strip()!r}")
            continue
        name = canonical(match.group(1))
        if name in pins:
            problems.append(f"{path.name}:{number}: {name} is pinned twice")
        pins[name] = Pin(name, match.group(3), match.group(2) or "", number)
    return pins, problems


@dataclass
class Manifest:
    """docker/image-cuda-libs.txt: sonames the 23.12 image provides, and symbol-version ceilings."""

    libs: dict[str, tuple[str, str]] = field(default_factory=dict)  # soname -> (directory, sources)
    symvers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # GLIBC -> (2, 35)
    absent: dict[str, str] = field(default_factory=dict)  # soname -> what the image has instead


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def read_manifest(path: Path) -> tuple[Manifest, list[str]]:
    manifest = Manifest()
    problems = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        kind = parts[0]
        if kind == "lib" and len(parts) >= 4:
            soname = parts[1]
            directory = " ".join(parts[2:-1])
            manifest.libs[soname] = (directory, parts[-1])
        elif kind == "symver" and len(parts) == 4:
            manifest.symvers[parts[1]] = version_tuple(parts[2])
        elif kind == "absent" and len(parts) >= 4:
            manifest.absent[parts[1]] = " ".join(parts[2:-1])
        else:
            problems.append(f"{path.name}:{number}: cannot parse {raw!r}")
    for soname in set(manifest.libs) & set(manifest.absent):
        problems.append(f"{path.name}: {soname} is listed as both provided and absent")
    return manifest, problems


def pip_environment() -> dict[str, str]:
    """pip talking to PyPI only, as `docker build` does: no site or user pip.conf, no local wheel folders.

    A local find-links/extra-index lacks Requires-Python metadata, and pip then accepts wheels that the
    target Python cannot install (seen here: networkx 3.6 "resolved" for Python 3.10).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    for kept in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "PIP_TRUSTED_HOST"):
        if kept in os.environ:
            env[kept] = os.environ[kept]
    return env


def manylinux_platforms(glibc_minor: int) -> list[str]:
    """pip --platform values a glibc 2.<glibc_minor> x86-64 system accepts (explicit tags do not cascade)."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 16, -1)]
    return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


class Outcome:
    """Collects PASS/FAIL lines; the exit status is 1 when anything failed."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def ok(self, message: str) -> None:
        print(f"  PASS  {message}", flush=True)

    def fail(self, message: str) -> None:
        print(f"  FAIL  {message}", flush=True)
        self.failures.append(message)

    def check(self, condition: bool, passed: str, failed: str) -> bool:
        if condition:
            self.ok(passed)
        else:
            self.fail(failed)
        return condition

    def finish(self, title: str) -> int:
        if self.failures:
            print(f"\n{title}: FAILED ({len(self.failures)})")
            for failure in self.failures:
                print(f"  - {failure}")
            return 1
        print(f"\n{title}: all checks passed")
        return 0


def python_ok() -> None:
    # The project's venv is >= 3.10 already; this guards running the scripts with another interpreter.
    if sys.version_info < (3, 10):  # noqa: UP036
        sys.exit("docker/checks need Python >= 3.10")
