"""Model repositories built from typed specs: config.pbtxt is rendered from Triton's own ModelConfig message
(tritonclient.grpc.model_config_pb2) through protobuf's text_format, never from strings (imports no more
than protobuf and tritonclient's ModelConfig: the offline `triton-ort config` reads configs with it)."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2


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
