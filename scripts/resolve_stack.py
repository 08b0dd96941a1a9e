"""Show that a stack's requirements resolve for CPython 3.10, 3.11 and 3.12 on Linux x86-64 (PyPI only):
`pip install --dry-run` for each interpreter, and what it would install (`make gpu-stack-check`).

    python scripts/resolve_stack.py requirements-cuda.txt --with numpy==1.26.4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docker" / "checks"))
from common import manylinux_platforms, pip_environment, requirement_lines  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402

SHOWN = ("torch", "onnxruntime", "onnxruntime-gpu", "numpy", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")


def for_python(requirements: Path, python: str) -> list[str]:
    """The requirements (and -r includes) whose environment markers hold for CPython `python` on Linux.
    pip evaluates a requirement file's markers for the interpreter it runs on, not for --python-version."""
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux"}
    kept = []
    for line in requirement_lines(requirements):
        for option in line.options:
            key, _, value = option.partition("=")
            if key in ("-r", "--requirement"):
                kept += for_python(requirements.parent / value, python)
        if line.requirement:
            requirement = Requirement(line.requirement)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                requirement.marker = None
                kept.append(str(requirement))
    return kept


def resolve(requirements: Path, python: str, extra: list[str]) -> dict[str, str]:
    """name -> version pip would install for CPython `python` (glibc 2.28+ x86-64); raises on failure."""
    abi = "cp" + python.replace(".", "")
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--report", str(report), "--target", str(Path(scratch) / "t"), "--only-binary=:all:"]
        command += ["--python-version", python, "--implementation", "cp", "--abi", abi]
        command += ["--index-url", "https://pypi.org/simple"]
        for platform in manylinux_platforms(28):
            command += ["--platform", platform]
        result = subprocess.run(
            [*command, *for_python(requirements, python), *extra],
            capture_output=True,
            text=True,
            env=pip_environment(),
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError((result.stderr or result.stdout).strip()[-1500:])
        installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("requirements", type=Path)
    parser.add_argument("--with", dest="extra", action="append", default=[], help="extra requirement")
    parser.add_argument("--python", action="append", default=[], help="default: 3.10, 3.11, 3.12")
    args = parser.parse_args()
    failed = 0
    for python in args.python or ["3.10", "3.11", "3.12"]:
        try:
            resolved = resolve(args.requirements, python, args.extra)
        except RuntimeError as error:
            print(f"CPython {python}: does NOT resolve\n{error}")
            failed += 1
            continue
        shown = ", ".join(f"{n}=={resolved[n]}" for n in SHOWN if n in resolved)
        print(f"CPython {python}: resolves, {len(resolved)} distributions: {shown}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
