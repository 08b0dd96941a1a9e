"""The repository's text stands on its own: no path or link that leaves the checkout, and every relative
Markdown link resolves. A user has only the clone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

# `../x` steps out of the checkout; `.../x` (an elided path) does not.
PARENT_REFERENCE = re.compile(r"(?<![\w.])\.\./")
# Paths of one machine: a workspace, a home folder. The image's own HOME (docker/Dockerfile) is a path
# inside the container, not on anyone's machine.
LOCAL_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|Users|mnt|home/(?!triton-server\b)[\w.-]+)/")
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True).stdout
    if not listed:  # a copy without git's index: the tracked files are not known
        pytest.skip("not a git checkout: `git ls-files` lists nothing")
    files = []
    for name in filter(None, listed.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:  # text, not an ONNX file or an image
            files.append(path)
    return files


def offending_lines(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in tracked_text_files():
        if path == Path(__file__).resolve():  # this file's examples of what is refused
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_the_checks_see_the_repository() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in tracked_text_files()}
    assert {"README.md", "Makefile", "docs/gpu-host.md", "client/bench.py"} <= names


@pytest.mark.parametrize(
    ("text", "leaves"),
    [
        ("see ../shared/GPU.md", True),
        ("[x](../other/README.md)", True),
        ('"/work/main/client/bench.py"', True),
        ("cd /root/out", True),
        ("/home/alice/project", True),
        (".../libcudart.so.12", False),
        ("ENV HOME=/home/triton-server", False),
        ("docs/gpu-host.md", False),
        ("/opt/tritonserver/backends", False),
    ],
)
def test_the_patterns_catch_what_leaves_the_repository(text: str, leaves: bool) -> None:
    assert bool(PARENT_REFERENCE.search(text) or LOCAL_PATH.search(text)) is leaves


PARENT_PATH = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]*)")


def stays_inside(path: Path, reference: str) -> bool:
    """A `../` path that resolves inside the checkout: from the file's folder, or (config.pbtxt) from one of
    its version folders, where Triton resolves a model's relative paths."""
    bases = [path.parent, *(d for d in path.parent.iterdir() if d.is_dir())]
    return any((base / reference).resolve().is_relative_to(ROOT) for base in bases)


def test_no_reference_leaves_the_repository() -> None:
    leaving = []
    for found in offending_lines(PARENT_REFERENCE):
        name, _, line = found.partition(":")
        path = ROOT / name
        if not all(stays_inside(path, ref) for ref in PARENT_PATH.findall(line.partition(": ")[2])):
            leaving.append(found)
    assert leaving == []


def test_a_parent_path_inside_the_checkout_is_allowed() -> None:
    overlay = ROOT / "deploy" / "kubernetes" / "overlays" / "cpu" / "kustomization.yaml"
    assert stays_inside(overlay, "../../base")
    assert not stays_inside(overlay, "../../../../../shared/GPU.md")


def test_no_path_of_one_machine() -> None:
    assert offending_lines(LOCAL_PATH) == []


def test_relative_markdown_links_resolve() -> None:
    broken = []
    for path in tracked_text_files():
        if path.suffix != ".md":
            continue
        for target in MARKDOWN_LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:|#", target):  # web links and anchors in the same page
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            if not resolved.exists() or not resolved.is_relative_to(ROOT):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def requests_argument(path: Path) -> int:
    """The one `--requests N` a file's soak command passes (a test's argument list or a Makefile recipe)."""
    found = re.findall(r'--requests"?,?\s+"?(\d+)', (ROOT / path).read_text())
    assert len(found) == 1, f"{path}: expected one --requests, found {found}"
    return int(found[0])


def soak_sizes() -> dict[str, int]:
    """The soak sizes the code runs, read from the code."""
    from client.soak import parse_args

    return {
        "default": parse_args(["--local"]).requests,
        "CI": requests_argument(Path("tests/reliability/test_load.py")),
        "GPU": requests_argument(Path("tests/reliability/test_gpu_memory.py")),
        "make soak": requests_argument(Path("Makefile")),
    }


def test_every_soak_size_the_docs_give_is_one_the_code_runs() -> None:
    sizes = set(soak_sizes().values())
    for path in [ROOT / "README.md", ROOT / "client" / "soak.py", *sorted((ROOT / "docs").glob("*.md"))]:
        for given in re.findall(r"--requests[ =](\d+)", path.read_text()):
            assert int(given) in sizes, f"{path.relative_to(ROOT)}: --requests {given}, the code runs {sizes}"


def test_the_docs_name_each_soak_size() -> None:
    sizes = soak_sizes()
    reliability = (ROOT / "docs" / "reliability.md").read_text()
    assert f"{sizes['default']:,} requests is `client.soak`'s default" in reliability
    assert f"{sizes['CI']:,} is the CI size" in reliability
    assert f"{sizes['GPU']:,} is the GPU soak" in reliability
    assert f"{sizes['make soak']:,} is `make soak`" in reliability
    help_line = next(
        line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("soak:")
    )
    assert f"{sizes['make soak'] // 1000}k " in help_line
    docstring = (ROOT / "client" / "soak.py").read_text().split('"""')[1]
    assert f"{sizes['default']:,} requests" in docstring
