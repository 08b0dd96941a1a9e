"""What the launcher checks before tritonserver starts, and how it reads why a start failed.

A model folder (config.pbtxt, version folders, the backend's name, model.py, the ONNX file and hooks
module) and a whole repository are checked first, so that a missing file fails in a second naming its
path and a misspelt backend names the closest one, instead of after Triton's load timeouts;
`triton-ort config` makes the same folder check offline, so this module imports no more than protobuf and
tritonclient's ModelConfig (no psutil, no gRPC). After a failed start, load_errors reads each model's own
error from tritonserver's log.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2

from triton_ort.backend import BACKEND_NAME
from triton_ort.harness.repository import read_config

# The backends whose models run a model.py in a python-backend stub: Triton's own, and ours. They are the
# backends the launcher's tritonserver has (its backend directory holds these two).
PYTHON_BACKENDS = ("python", BACKEND_NAME)
# What reading a config.pbtxt raises when it is not a ModelConfig.
UNREADABLE_CONFIG = (text_format.ParseError, DecodeError, UnicodeDecodeError)

# Triton's log lines that say why a start failed (stable across 2.41 and 2.51: core/src/model_lifecycle.cc,
# server/src/grpc/grpc_server.cc, server/src/http_server.cc). Release-specific wording lives here only.
_GLOG_HEADER = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.]+:\d+\] ")
_LOAD_FAILED = re.compile(r"failed to load '(?P<model>[^']+)' version (?P<version>\d+): (?P<message>.*)")
_POLL_FAILED = re.compile(r"Poll failed for model directory '(?P<model>[^']+)': (?P<message>.*)")
_IN_USE = re.compile(r"already in use")
_FATAL = re.compile(r"^error: (?P<message>.*)")
# Lines after a load error's first line that still belong to it (the model's own detail lines), up to
# the python backend's "At:" traceback or the next log record.
_DETAIL_LINES = 6


class ServerStartError(RuntimeError):
    """tritonserver did not become ready; the message starts with the cause, then names the log file."""

    def __init__(self, message: str, log_path: Path | None = None, port_conflict: bool = False) -> None:
        super().__init__(message)
        self.log_path = log_path
        self.port_conflict = port_conflict


# --- a model folder, checked before tritonserver starts (and by `triton-ort config`) ----------------------


def backend_problem(model: str, backend: str, backends: Collection[str]) -> str:
    """Why `backend` cannot serve the model ('' when it can): tritonserver's own error for a backend it
    does not have names library paths only, after its other loads; this names what there is and the
    closest name."""
    if not backend or backend in backends:
        return ""  # no backend: Triton picks one from the platform or the files, and says so itself
    close = difflib.get_close_matches(backend, sorted(backends), n=1)
    return (
        f"model '{model}': backend {backend!r} is not one the server has ({', '.join(sorted(backends))})"
        + (f"; did you mean {close[0]}?" if close else "")
    )


def runs_triton_ort(config: model_config_pb2.ModelConfig, version: Path) -> bool:
    """Whether the model's version folder is served by this project's adapter: backend
    onnxruntime_zerocopy, or backend python with a model.py that imports triton_ort."""
    if config.backend == BACKEND_NAME:
        return True
    model_py = version / (config.default_model_filename or "model.py")
    return (
        config.backend == "python"
        and model_py.is_file()
        and "triton_ort" in model_py.read_text(errors="replace")
    )


def versions_to_load(model_dir: Path, config: model_config_pb2.ModelConfig) -> tuple[list[Path], str]:
    """(version folders Triton's version_policy selects, problem or '')."""
    numbered = sorted((int(p.name), p) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not numbered:
        return [], f"{model_dir} has no version folder (expected e.g. {model_dir / '1'}/)"
    policy = config.version_policy
    if policy.HasField("all"):
        return [p for _, p in numbered], ""
    if policy.HasField("specific"):
        present = dict(numbered)
        missing = [v for v in policy.specific.versions if v not in present]
        if missing:
            return [], f"{model_dir}: version_policy names versions {missing}, which have no folder"
        return [present[v] for v in policy.specific.versions], ""
    latest = policy.latest.num_versions if policy.HasField("latest") else 1
    return [p for _, p in numbered[-max(latest, 1) :]], ""


def check_model(model_dir: Path, backends: Collection[str] = PYTHON_BACKENDS) -> list[str]:
    """What is missing from one model folder, each problem naming the path it expected; `backends`: the
    ones the server has."""
    config_path = model_dir / "config.pbtxt"
    if not config_path.is_file():
        return [f"model '{model_dir.name}': {config_path} is missing (it names the backend and the tensors)"]
    try:
        config = read_config(model_dir)
    except UNREADABLE_CONFIG as error:
        return [f"model '{model_dir.name}': {config_path} is not a valid model configuration: {error}"]
    versions, problem = versions_to_load(model_dir, config)
    if problem:
        return [f"model '{model_dir.name}': {problem}"]
    if problem := backend_problem(model_dir.name, config.backend, backends):
        return [problem]
    if config.backend not in PYTHON_BACKENDS:
        return []  # other backends check their own files
    problems = []
    onnx_parameter = config.parameters.get("onnx_file")
    onnx_file = onnx_parameter.string_value.strip() if onnx_parameter is not None else "model.onnx"
    hooks_parameter = config.parameters.get("hooks")
    hooks_file = hooks_parameter.string_value.strip() if hooks_parameter is not None else ""
    for version in versions:
        if config.backend == "python":
            model_py = version / (config.default_model_filename or "model.py")
            if not model_py.is_file():
                problems.append(
                    f"model '{model_dir.name}': {model_py} is missing (backend \"python\" runs the "
                    f'model.py of the version folder; backend "{BACKEND_NAME}" needs none)'
                )
                continue
            if not runs_triton_ort(config, version):
                continue  # another python model (pre-processing, BLS): no ONNX file of ours to look for
        onnx_path = version / onnx_file
        if not onnx_path.is_file():
            problems.append(
                f"model '{model_dir.name}': ONNX file {onnx_path} is missing "
                f"(parameter onnx_file={onnx_file!r}{'' if onnx_parameter is not None else ', the default'})"
            )
        if hooks_file and not (version / hooks_file).is_file():
            problems.append(
                f"model '{model_dir.name}': hooks module {version / hooks_file} is missing "
                f"(parameter hooks={hooks_file!r})"
            )
    return problems


# --- the model repository, checked before tritonserver starts -------------------------------------------


def option_values(args: Sequence[str], name: str) -> list[str]:
    """Values of a tritonserver option given as `--name=value` or `--name value`."""
    values = []
    for index, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            values.append(arg.split("=", 1)[1])
        elif arg == name and index + 1 < len(args):
            values.append(args[index + 1])
    return values


def without_option(args: Sequence[str], name: str) -> list[str]:
    """`args` less a tritonserver option, in either form (`--name=value`, `--name value`)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(f"{name}="):
            kept.append(arg)
    return kept


def models_loaded_at_start(server_args: Sequence[str]) -> list[str] | None:
    """The model folders Triton loads at startup: None for all of them, or under explicit model control
    only the --load-model ones."""
    modes = option_values(server_args, "--model-control-mode")
    if not modes or modes[-1] != "explicit":
        return None
    named = option_values(server_args, "--load-model")
    return None if "*" in named else named


def python_backends_in(repository: Path, family: Collection[str] = PYTHON_BACKENDS) -> set[str]:
    """Which of the python backend's family ('python', ours, other Python-based backends the server has)
    the repository's model configs name."""
    found = set()
    for config_path in repository.glob("*/config.pbtxt"):
        try:
            config = read_config(config_path.parent)
        except UNREADABLE_CONFIG:
            continue  # check_model reports it
        if config.backend in family:
            found.add(config.backend)
    return found


def own_shm_prefix_is_safe(
    repositories: Sequence[Path], python_based: Collection[str] = PYTHON_BACKENDS
) -> bool:
    """Whether this server may give the python backend a shared-memory prefix of its own.

    Triton 23.12 (up to 24.03) names a stub's region <prefix><n>, numbering from 1 per backend; the default
    prefix carries the backend's name (triton_<backend>_backend_shm_region_), but an explicit
    shm-region-prefix-name, which Triton passes to every python-based backend, does not. So `python` and
    `onnxruntime_zerocopy` models in one server then open the same regions, and the stubs die with
    boost::interprocess::lock_exception (measured on 2.41). From 24.04 the regions have unique names. The
    whole repository counts, loaded at start or not: explicit model control may load any folder later.
    `python_based`: every Python-based backend the server has (ours, and those of `backends` with a model.py);
    two of them named in the repository make the prefix unsafe."""
    return len(set().union(*(python_backends_in(root, python_based) for root in repositories))) < 2


def backend_folders(server_args: Sequence[str]) -> dict[str, Path]:
    """The backend folders of any --backend-directory among the server's arguments, by name."""
    extra = [Path(d) for d in option_values(server_args, "--backend-directory")]
    return {p.name: p for d in extra if d.is_dir() for p in sorted(d.iterdir()) if p.is_dir()}


def server_backends(server_args: Sequence[str] = ()) -> set[str]:
    """The backends the launcher's tritonserver has: the two of its own backend directory, and the folders
    of any --backend-directory among the extra arguments."""
    return {*PYTHON_BACKENDS, *backend_folders(server_args)}


def model_folder_as_repository(root: Path) -> str:
    """Why `root`, given as a model repository, is one model's folder ('' when it is not): it holds a
    config.pbtxt, or only version folders (numbers), the first without a config.pbtxt of its own. Triton
    would take each version folder for a model whose config.pbtxt is missing."""
    folders = [p.name for p in root.iterdir() if p.is_dir()]
    versions = sorted((name for name in folders if name.isdigit()), key=int)
    if (root / "config.pbtxt").is_file():
        holds = "config.pbtxt" + (f" and version folder {versions[0]}/" if versions else "")
    elif versions and len(versions) == len(folders) and not (root / versions[0] / "config.pbtxt").is_file():
        holds = f"version folder {versions[0]}/"
    else:
        return ""
    return (
        f"model repository {root} is a model's folder (it holds {holds}): "
        f"pass its parent, --model-repository {root.parent}"
    )


def check_repository(
    repository: Path | Sequence[Path],
    models: Sequence[str] | None = None,
    backends: Collection[str] = PYTHON_BACKENDS,
) -> None:
    """Raise ServerStartError listing every model folder that Triton could not load for a missing or
    unreadable file or a backend it does not have (repository_problems)."""
    if problems := repository_problems(repository, models, backends):
        raise ServerStartError("model repository check failed:\n" + "\n".join(problems))


def repository_problems(
    repository: Path | Sequence[Path],
    models: Sequence[str] | None = None,
    backends: Collection[str] = PYTHON_BACKENDS,
) -> list[str]:
    """Why each model folder could not load, one line a model (a missing or unreadable file, a backend the
    server does not have); ServerStartError where a repository itself is wrong. `repository`: one, or every
    --model-repository of the server (a named model is looked up in each, as Triton does); `models`: only
    these folders (default: all); `backends`: the server's (server_backends)."""
    repositories = [repository] if isinstance(repository, Path) else list(repository)
    for root in repositories:
        if not root.is_dir():
            raise ServerStartError(f"model repository {root} is not a directory")
        if problem := model_folder_as_repository(root):
            raise ServerStartError(problem)
    folders = {p.name: p for root in reversed(repositories) for p in root.iterdir() if p.is_dir()}
    names = models if models is not None else sorted(folders)
    problems = []
    for name in names:
        model_dir = folders.get(name)
        if model_dir is None:
            where = " or ".join(str(root / name) for root in repositories)
            problems.append(f"model '{name}': {where} does not exist (named by --load-model)")
        else:
            problems.extend(check_model(model_dir, backends))
    return problems


# --- tritonserver's log -------------------------------------------------------------------------------


def _records(log: str) -> list[list[str]]:
    """The log split into records: a glog line with its continuation lines, or one plain line."""
    records: list[list[str]] = []
    for line in log.splitlines():
        starts = _GLOG_HEADER.match(line) or _FATAL.match(line) or line.startswith(("+", "|"))
        if starts or not records or not line.strip():
            records.append([_GLOG_HEADER.sub("", line)])
        else:
            records[-1].append(line)
    return records


def _with_detail(first: str, rest: list[str]) -> str:
    detail = []
    for line in rest:
        if not line.strip() or line.strip() == "At:":
            break
        detail.append(line.rstrip())
    return "\n".join([first, *detail[:_DETAIL_LINES]])


_ESCAPES = {'"': '"', "\\": "\\", "n": "\n"}
_ESCAPED = re.compile(r'\\(["\\n])')


def _unescaped(message: str) -> str:
    """A message as Triton 2.51 logs it (quoted, on one line: `\\"`, `\\\\` and `\\n` escaped; seen on the GPU
    test host) in the words 2.41 logs it."""
    return _ESCAPED.sub(lambda found: _ESCAPES[found[1]], message)


def load_errors(log: str) -> list[str]:
    """The causes of a failed start, most specific first: each model's own load error (once per model),
    a port already in use, then Triton's final `error: ...` line."""
    found: dict[str, str] = {}
    ports, fatal = [], []
    for first, *rest in _records(log):
        if failed := _LOAD_FAILED.search(first):
            key, message = failed["model"], failed["message"]
            if first.startswith('"'):  # 2.51's quoted form: one line, its quotes and newlines escaped
                message, *more = _unescaped(message.removesuffix('"')).split("\n")
                rest = [*more, *rest]
            what = f"model '{key}' version {failed['version']} failed to load: {message}"
            found.setdefault(key, _with_detail(what, rest))
        elif polled := _POLL_FAILED.search(first):
            found.setdefault(
                polled["model"], _with_detail(f"model '{polled['model']}': {polled['message']}", rest)
            )
        elif _IN_USE.search(first):
            ports.append(first.strip())
        elif error := _FATAL.match(first):
            fatal.append(f"tritonserver: {error['message']}")
    return [*found.values(), *dict.fromkeys(ports), *fatal[-1:]]
