"""The repository's text stands on its own: no path or link that leaves the checkout, every relative
Markdown link resolves to a file and a heading that exist, and the text speaks to users: no issue numbers,
lettered measurement calls or development sessions. A user has only the clone."""

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
    """The repository's text files: tracked ones, and new ones git does not ignore (a copy of a working
    tree whose index predates a new file still checks it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    ).stdout
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
    assert {"README.md", "Makefile", "docs/gpu-host.md", "client/smoke.py", "CHANGELOG.md"} <= names


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


FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings (lowercase; punctuation but `-` and `_` dropped; spaces
    to `-`; a repeated heading gets `-1`, `-2`, ...), outside fenced code blocks."""
    anchors: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("## No registry: `make up-local`", "no-registry-make-up-local"),
        (
            '## Troubleshooting: "There\'s no data transfer registered"',
            "troubleshooting-theres-no-data-transfer-registered",
        ),
        ("## CPU: 2-core development machine", "cpu-2-core-development-machine"),
        ("### Answers on the GPU: TF32", "answers-on-the-gpu-tf32"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert anchor in heading_anchors(heading)


def test_anchors_of_markdown_links_name_a_heading() -> None:
    """`page.md#anchor` and `#anchor`: the heading is there (a renamed section breaks no link silently)."""
    broken = []
    for path in tracked_text_files():
        if path.suffix != ".md":
            continue
        for target in MARKDOWN_LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:", target) or "#" not in target:
                continue
            page, _, anchor = target.partition("#")
            linked = (path.parent / page).resolve() if page else path
            if (
                linked.suffix == ".md"
                and linked.is_file()
                and anchor not in heading_anchors(linked.read_text())
            ):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; details belong in docs/"
    opening = "\n".join(lines[:6])
    assert "make run" in opening and "make test" in opening
    assert len((ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= 250


# Words of the project's development, not of its use: an issue by number, a lettered measurement call
# ("call J", "calls A-C"), a development session or its device time. ONNX Runtime's sessions
# (InferenceSession, "the session's outputs") and references to other projects' issues by repository
# (`python_backend#381`, `.../issues/6000`) are ordinary words here.
ISSUE_NUMBER = re.compile(r"(?i)(?<![\w/])issues?[ _-]?#?\d+")
LETTERED_CALL = re.compile(r"\b[Cc]alls? [A-Z](?:\d+|-[A-Z])?(?![\w(.])")
ORDINAL = (
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(?:st|nd|rd|th)"
)
DEVELOPMENT_SESSION = re.compile(
    rf"(?i)\b(?:{ORDINAL}|development|dev) sessions?\b|\bsession'?s? (?:gpu|device) time\b"
    r"|\bdevice[ -]time\b|\bdevice calls?\b"
)
DEVELOPMENT_WORDS = (ISSUE_NUMBER, LETTERED_CALL, DEVELOPMENT_SESSION)
# Where the project speaks to its users: the docs, the changelog, the code, its tools and tests.
USER_FACING = ("README.md", "CHANGELOG.md", "docs/", "src/", "client/", "tests/", "diagnostics/")


@pytest.mark.parametrize(
    ("text", "development"),
    [
        ("issue 31's targets, final", True),
        ("see issue #31", True),
        ("[x](benchmarks.md#issue-31s-targets)", True),
        ("Issue 18's targets", True),
        ("call J: host outputs", True),
        ("calls A-C, then call D", True),
        ("the call G1 clock", True),
        ("(twelfth session)", True),
        ("this session's device time", True),
        ("the session's GPU time was spent", True),
        ("one device call, 260 s", True),
        ("the 3rd session", True),
        ("InferenceSession(path)", False),
        ("the session's outputs", False),
        ("an ORT session per instance", False),
        ("each session created with the CUDA EP", False),
        ("python_backend#381", False),
        ("https://github.com/triton-inference-server/server/issues/6000", False),
        ("Call a hook; what it raises becomes the error", False),
        ("the GPU's own time (CUDA events)", False),
        ("one call per execute", False),
    ],
)
def test_the_development_words_are_caught_precisely(text: str, development: bool) -> None:
    assert any(pattern.search(text) for pattern in DEVELOPMENT_WORDS) is development


def test_no_issue_numbers_lettered_calls_or_development_sessions() -> None:
    """The docs, the code, its tools and its tests speak of the project to its users."""
    found = []
    for path in tracked_text_files():
        name = path.relative_to(ROOT).as_posix()
        if path == Path(__file__).resolve() or not name.startswith(USER_FACING):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(pattern.search(line) for pattern in DEVELOPMENT_WORDS):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []


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


DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# The pages a newcomer reads first: their figures stand in tables, each dated once, not in every sentence.
SKIMMABLE = (
    "README.md",
    "docs/perf.md",
    "docs/model-analyzer.md",
    "docs/serving-your-model.md",
    "docs/troubleshooting.md",
    "docs/metrics.md",
    "docs/gpu-hosts.md",
    "docs/docker.md",
    "docs/pipelines.md",
    "docs/reliability.md",
    "docs/inflight.md",
)


@pytest.mark.parametrize("page", SKIMMABLE)
def test_a_date_stands_only_in_a_table_or_the_line_that_opens_one(page: str) -> None:
    """A dated figure in prose makes a page hard to skim: dates go in a table's rows, or in the one
    paragraph just above a table that says when and where all of it was measured."""
    lines = (ROOT / page).read_text().splitlines()
    in_code = False
    prose_dates = []
    for number, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or line.startswith("|") or not DATE.search(line):
            continue
        end = next((i for i in range(number, len(lines)) if not lines[i].strip()), len(lines))
        after = next((ln for ln in lines[end:] if ln.strip()), "")
        if not after.startswith("|"):  # the date's paragraph is not the one just above a table
            prose_dates.append(f"{page}:{number + 1}: {line.strip()[:80]}")
    assert prose_dates == []
