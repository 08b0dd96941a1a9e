"""Pack a Python environment for the python backend's EXECUTION_ENV_PATH (docs/execution-env.md).

    python scripts/pack_env.py --stack cpu --out env.tar.gz          # for the local tritonserver
    python scripts/pack_env.py --stack cpu --no-torch --out env.tar.gz   # CPU models without hooks
    python scripts/pack_env.py --stack cuda --requirements docker/requirements-gpu.txt \
        --python python3.10 --expect-python 3.10 --target-prefix /usr --out env.tar.gz   # Triton 23.12

The archive holds a venv with a pinned stack (requirements-<stack>.txt: torch and onnxruntime or
onnxruntime-gpu, with numpy and onnx as requirements-dev.txt pins them; or --requirements) and this
library, packed with venv-pack. A stock Triton
image then serves our models with it: config.pbtxt names it with
parameters { key: "EXECUTION_ENV_PATH", value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }.

How the python backend uses it (python_backend r23.12, src/stub_launcher.cc, src/pb_env.cc): it extracts
the archive to /tmp/python_env_XXXXXX/<n>, then starts the stub with `source <env>/bin/activate && exec
env LD_LIBRARY_PATH=<env>/lib:$LD_LIBRARY_PATH triton_python_backend_stub ...`. The stub's embedded
interpreter (libpython of the image, 3.10 in 23.12) finds `python3` on PATH, i.e. <env>/bin/python3, and
takes sys.prefix, hence site-packages, from the venv's pyvenv.cfg; the standard library comes from the
interpreter that symlink points at. So:
- the venv's Python minor version must be the stub's (--python picks the interpreter that builds it);
- bin/python* must point at that interpreter as installed on the server (--target-prefix: /usr in
  Triton's images, whose python3 is /usr/bin/python3.10), and pyvenv.cfg's home at its bin directory; it
  must be the build whose libpython the stub loads (another build's standard library may lack modules
  that the other build compiled in, e.g. Debian's built-in _struct).

Why venv-pack, not conda-pack (which python_backend's README shows): conda-pack packs only conda
environments, and this project installs from PyPI alone; the image already has the interpreter the stub
embeds, so a venv (site-packages plus links to that interpreter) is all the stub needs. venv-pack makes the
archive relocatable (its bin/activate finds its own folder, console-script shebangs become
`/usr/bin/env python`) and refuses editable installs, which would point outside the archive. Its own
--python-prefix rewrite is not used: it maps `<home>/python` to `<prefix>/bin/python3.X` by string prefix,
which turns a venv linked to `.../python3.X` into `.../python3.X3.X`; the links are set here instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import venv_pack
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docker" / "checks"))
from common import canonical, requirement_lines  # noqa: E402

STACKS = ("cpu", "cuda")
# Pins taken from requirements-dev.txt: the library's own dependencies that the stack files leave out.
LIBRARY_PINS = ("numpy", "onnx")
# What building the library's wheel reads (pyproject.toml names README.md as its readme).
PROJECT_FILES = ("pyproject.toml", "README.md", "src")


@dataclass(frozen=True)
class Interpreter:
    """The Python that builds the venv: its version and where it is installed."""

    executable: str
    version: tuple[int, int]
    base_prefix: str

    @property
    def minor(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def probe(python: str) -> Interpreter:
    code = "import json, sys; print(json.dumps([sys.executable, sys.version_info[:2], sys.base_prefix]))"
    try:
        ran = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    except OSError as error:
        raise SystemExit(f"pack_env: cannot run --python {python!r}: {error}") from None
    if ran.returncode != 0:
        said = next((line for line in ran.stderr.splitlines() if line.strip()), "no output")
        raise SystemExit(f"pack_env: --python {python!r} exited with {ran.returncode}: {said}")
    out = ran.stdout
    executable, version, base_prefix = json.loads(out)
    return Interpreter(executable, (version[0], version[1]), base_prefix)


def requirement_names(path: Path) -> set[str]:
    return {
        canonical(Requirement(line.requirement).name) for line in requirement_lines(path) if line.requirement
    }


def library_pins(requirements: Path) -> list[str]:
    """requirements-dev.txt's pins of the library's own dependencies that `requirements` leaves out
    (the stack files pin torch and ORT only; docker/requirements-gpu.txt pins everything)."""
    named = requirement_names(requirements)
    pins = {}
    for line in requirement_lines(ROOT / "requirements-dev.txt"):
        if line.requirement and canonical(Requirement(line.requirement).name) in LIBRARY_PINS:
            pins[canonical(Requirement(line.requirement).name)] = line.requirement
    missing = sorted(set(LIBRARY_PINS) - set(pins))
    if missing:
        raise SystemExit(f"pack_env: requirements-dev.txt pins none of {missing}")
    return [pins[name] for name in LIBRARY_PINS if name not in named]


def without_torch(requirements: Path, scratch: Path) -> Path:
    """`requirements` less torch, written in `scratch`: a CPU model without hooks never imports it
    (triton_ort.runtime.arrays), so its archive need not carry it."""
    kept = [
        " ".join([line.requirement, *line.options])
        for line in requirement_lines(requirements)
        if not line.requirement or canonical(Requirement(line.requirement).name) != "torch"
    ]
    path = scratch / f"{requirements.stem}-without-torch.txt"
    path.write_text("\n".join(kept) + "\n")
    return path


def build_venv(interpreter: Interpreter, venv: Path, requirements: Path, pip_args: list[str]) -> None:
    """A venv of `interpreter` without pip, filled by this Python's pip (`pip --python`, pip >= 22.3)."""
    subprocess.run([interpreter.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet"]
    subprocess.run([*pip, "-r", str(requirements), *library_pins(requirements), *pip_args], check=True)
    # Then the library itself, built as a wheel (an editable install would point outside the archive),
    # apart: a hash-locked file puts pip in hash-checking mode, which a source folder cannot satisfy. From
    # a copy: setuptools builds in the source tree and would leave build/ in the checkout.
    source = venv.parent / "source"
    source.mkdir()
    for name in PROJECT_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
            )
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run([*pip, "--no-deps", str(source), *pip_args], check=True)
    # Every dependency of the library and the stack is there, in versions that satisfy each other.
    subprocess.run([*pip[:-2], "check"], check=True, stdout=subprocess.DEVNULL)


def link_to_target_interpreter(venv: Path, interpreter: Interpreter, target_prefix: str) -> None:
    """Point bin/python* and pyvenv.cfg at the interpreter as installed on the server."""
    target = f"{target_prefix.rstrip('/')}/bin/python{interpreter.minor}"
    for name in ("python", "python3", f"python{interpreter.minor}"):
        link = venv / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    config = venv / "pyvenv.cfg"
    lines = [
        f"home = {target_prefix.rstrip('/')}/bin" if line.split("=", 1)[0].strip() == "home" else line
        for line in config.read_text().splitlines()
    ]
    config.write_text("\n".join(lines) + "\n")


def pack(args: argparse.Namespace) -> dict[str, object]:
    interpreter = probe(args.python)
    if args.expect_python is not None and interpreter.minor != args.expect_python:
        raise SystemExit(
            f"pack_env: --python {args.python} is Python {interpreter.minor}, but the stub embeds Python "
            f"{args.expect_python} (--expect-python); the venv's minor version must be the stub's"
        )
    requirements = (args.requirements or ROOT / f"requirements-{args.stack}.txt").resolve()
    prefix = (args.target_prefix or interpreter.base_prefix).rstrip("/")
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="triton_ort_pack_env_") as scratch:
        venv = Path(scratch) / "env"
        started = time.monotonic()
        stack = without_torch(requirements, Path(scratch)) if args.no_torch else requirements
        build_venv(interpreter, venv, stack, args.pip_arg)
        installed_s = time.monotonic() - started
        link_to_target_interpreter(venv, interpreter, prefix)
        started = time.monotonic()
        out.unlink(missing_ok=True)
        venv_pack.pack(prefix=str(venv), output=str(out), compress_level=args.compress_level)
        packed_s = time.monotonic() - started
    return {
        "archive": str(out),
        "requirements": requirements.name + (" without torch" if args.no_torch else ""),
        "python": interpreter.minor,
        "interpreter_on_server": f"{prefix}/bin/python{interpreter.minor}",
        "archive_mib": round(out.stat().st_size / 2**20, 1),
        "install_s": round(installed_s, 1),
        "pack_s": round(packed_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stack", choices=STACKS, required=True, help="cpu or cuda: requirements-<stack>.txt"
    )
    parser.add_argument(
        "--requirements",
        type=Path,
        help="another pinned stack instead, e.g. docker/requirements-gpu.txt (CUDA <= 12.3, for 23.12)",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter that builds the venv; its minor version must be the stub's (23.12: 3.10)",
    )
    parser.add_argument(
        "--target-prefix",
        help="where that interpreter is installed on the server (Triton's images: /usr); "
        "default: the --python's own prefix (a server on this machine)",
    )
    parser.add_argument("--expect-python", help="refuse an interpreter of another minor version, e.g. 3.10")
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="leave torch out: enough for CPU instances without hooks (GPU instances and hooks need it)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the archive, e.g. <model>/env.tar.gz")
    parser.add_argument(
        "--compress-level", type=int, default=4, help="gzip level 0-9 (venv-pack's default 4)"
    )
    parser.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="one more pip install argument, repeatable (e.g. --pip-arg=--index-url=URL)",
    )
    args = parser.parse_args()
    if os.sep in args.python and not Path(args.python).exists():
        parser.error(f"--python {args.python} does not exist")
    if args.no_torch and args.stack == "cuda":
        parser.error("--no-torch: GPU instances need torch (DLPack, CUDA streams); it is for --stack cpu")
    if args.requirements is not None and not args.requirements.is_file():
        parser.error(f"--requirements {args.requirements} is not a file")
    print(json.dumps(pack(args)))


if __name__ == "__main__":
    main()
