"""Model repositories built from typed specs: config.pbtxt is rendered from Triton's own ModelConfig message
(tritonclient.grpc.model_config_pb2) through protobuf's text_format, never from strings. And the check of a
model folder that the launcher makes before tritonserver starts, which `triton-ort config` makes too (so
this module imports no more than protobuf and tritonclient's ModelConfig)."""

from __future__ import annotations

import difflib
import shutil
import textwrap
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2

from triton_ort.backend import BACKEND_NAME

# The backends whose models run a model.py in a python-backend stub: Triton's own, and ours. They are the
# backends the launcher's tritonserver has (its backend directory holds these two).
PYTHON_BACKENDS = ("python", BACKEND_NAME)
# What reading a config.pbtxt raises when it is not a ModelConfig.
UNREADABLE_CONFIG = (text_format.ParseError, DecodeError, UnicodeDecodeError)


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of config.pbtxt; `data_type` without its TYPE_ prefix (FP32, INT64, ...)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    allow_ragged_batch: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """What a test model's config.pbtxt says. `queue_delay_us` None: no dynamic batching."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 64
    queue_delay_us: int | None = 100
    kind: str = "KIND_AUTO"
    count: int = 1
    # The library's models take inputs where Triton has them (GPU memory too): the zero-copy path.
    parameters: Mapping[str, str] = field(default_factory=lambda: {"FORCE_CPU_ONLY_INPUT_TENSORS": "no"})

    def config(self) -> model_config_pb2.ModelConfig:
        config = model_config_pb2.ModelConfig(
            name=self.name, backend="python", max_batch_size=self.max_batch_size
        )
        for specs, target in ((self.inputs, config.input), (self.outputs, config.output)):
            for spec in specs:
                tensor = target.add(name=spec.name, dims=list(spec.dims))
                tensor.data_type = model_config_pb2.DataType.Value(f"TYPE_{spec.data_type}")
                if spec.allow_ragged_batch:
                    tensor.allow_ragged_batch = True
        group = config.instance_group.add(count=self.count)
        group.kind = model_config_pb2.ModelInstanceGroup.Kind.Value(self.kind)
        if self.queue_delay_us is not None:
            config.dynamic_batching.max_queue_delay_microseconds = self.queue_delay_us
        for key, value in self.parameters.items():
            config.parameters[key].string_value = value
        return config


def read_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    """A model's config.pbtxt, parsed with Triton's own ModelConfig message."""
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def write_config(model_dir: Path, config: model_config_pb2.ModelConfig) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


def pin_one_instance(model_dir: Path) -> None:
    """One instance per group: for tests that count stubs or read one instance's log in order."""
    config = read_config(model_dir)
    for group in config.instance_group:
        group.count = 1
    write_config(model_dir, config)


def copy_model(
    source: Path,
    repository: Path,
    name: str,
    edit: Callable[[model_config_pb2.ModelConfig], None] | None = None,
) -> Path:
    """A copy of the model in `source` named `name`, its config edited by `edit`."""
    target = repository / name
    shutil.copytree(source, target)
    config = read_config(target)
    config.name = name
    if edit is not None:
        edit(config)
    write_config(target, config)
    return target


def add_model(
    repository: Path,
    spec: ModelSpec,
    model_py: Path | str,
    build_onnx: Callable[[Path], Path] | None = None,
) -> Path:
    """repository/<name>/{config.pbtxt, 1/model.py[, 1/model.onnx]}; `model_py` is a file or its source."""
    version = repository / spec.name / "1"
    version.mkdir(parents=True)
    if isinstance(model_py, Path):
        shutil.copy(model_py, version / "model.py")
    else:
        (version / "model.py").write_text(textwrap.dedent(model_py))
    if build_onnx is not None:
        build_onnx(version / "model.onnx")
    write_config(repository / spec.name, spec.config())
    return repository / spec.name


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
