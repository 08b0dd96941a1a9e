"""What the docker/ checks share: paths, requirement pins (through packaging), the image library manifest."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

DOCKER_DIR = Path(__file__).resolve().parent.parent
ROOT = DOCKER_DIR.parent
GPU_REQUIREMENTS = DOCKER_DIR / "requirements-gpu.txt"
CLIENT_REQUIREMENTS = DOCKER_DIR / "requirements-client.txt"
MANIFEST = DOCKER_DIR / "image-cuda-libs.txt"

# Distributions that install the `onnxruntime` module. Only onnxruntime-gpu may be in the server image.
ORT_MODULE_DISTRIBUTIONS = re.compile(r"^(onnxruntime(-.*)?|ort-nightly(-.*)?)$")
ORT_GPU = "onnxruntime-gpu"
ORT_CPU = "onnxruntime"


def canonical(name: str) -> str:
    """PEP 503 name normalisation: Jinja2 -> jinja2, zope.event -> zope-event."""
    return str(canonicalize_name(name))


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    extras: str
    line_number: int
    hashes: tuple[str, ...] = ()
    marker: str = ""


@dataclass(frozen=True)
class RequirementLine:
    """One logical line of a requirements file: continuations joined, comment dropped, options split off."""

    path: Path
    line_number: int
    requirement: str  # "" for an option-only line such as `-r other.txt`
    options: tuple[str, ...]


def requirement_lines(path: Path) -> list[RequirementLine]:
    """The logical lines of a pip requirements file (the format pip, pip-compile and uv write)."""
    lines: list[RequirementLine] = []
    pending = ""
    first = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        text = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            first = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text = (pending + text).strip()
        pending = ""
        if not text:
            continue
        words = text.split()
        options: list[str] = []
        requirement: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            if word.startswith("-"):
                if "=" not in word and word in ("-r", "-c", "--requirement", "--constraint", "--hash"):
                    options.append(f"{word}={words[index + 1]}" if index + 1 < len(words) else word)
                    index += 2
                    continue
                options.append(word)
            else:
                requirement.append(word)
            index += 1
        lines.append(RequirementLine(path, first, " ".join(requirement), tuple(options)))
    return lines


def _included(line: RequirementLine) -> list[Path]:
    files = []
    for option in line.options:
        key, _, value = option.partition("=")
        if key in ("-r", "--requirement") and value:
            files.append((line.path.parent / value).resolve())
    return files


def read_pins(path: Path, follow_includes: bool = True) -> tuple[dict[str, Pin], list[str]]:
    """The exact pins (`name==version`) of a requirements file and of the files it includes with -r, and a
    problem for every requirement that is not one. A name may be pinned once per environment marker."""
    pins: dict[str, Pin] = {}
    seen: set[tuple[str, str]] = set()
    problems = []
    for line in requirement_lines(path):
        if follow_includes:
            for included in _included(line):
                more, more_problems = read_pins(included)
                problems += more_problems
                for name, pin in more.items():
                    pins.setdefault(name, pin)
                    seen.add((name, pin.marker))
        if not line.requirement:
            continue
        where = f"{path.name}:{line.line_number}"
        try:
            requirement = Requirement(line.requirement)
        except InvalidRequirement as error:
            problems.append(f"{where}: not a requirement ({error}): {line.requirement!r}")
            continue
        specifiers = list(requirement.specifier)
        exact = (
            len(specifiers) == 1
            and specifiers[0].operator in ("==", "===")
            and "*" not in specifiers[0].version
            and requirement.url is None
        )
        if not exact:
            problems.append(f"{where}: not an exact pin (name==version): {line.requirement!r}")
            continue
        name = canonical(requirement.name)
        marker = str(requirement.marker or "")
        if (name, marker) in seen:
            problems.append(f"{where}: {name} is pinned twice")
        seen.add((name, marker))
        hashes = tuple(o.partition("=")[2] for o in line.options if o.startswith("--hash"))
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        pins.setdefault(name, Pin(name, specifiers[0].version, extras, line.line_number, hashes, marker))
    return pins, problems


def version_tuple(text: str) -> tuple[int, ...]:
    """The release numbers of a version ("12.3.101" -> (12, 3, 101)); non-PEP 440 text by its digits."""
    try:
        return tuple(Version(text).release)
    except InvalidVersion:
        return tuple(int(part) for part in re.findall(r"\d+", text))


@dataclass
class Manifest:
    """docker/image-cuda-libs.txt: sonames the 23.12 image provides, and symbol-version ceilings."""

    libs: dict[str, tuple[str, str]] = field(default_factory=dict)  # soname -> (directory, sources)
    symvers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # GLIBC -> (2, 35)
    absent: dict[str, str] = field(default_factory=dict)  # soname -> what the image has instead


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
