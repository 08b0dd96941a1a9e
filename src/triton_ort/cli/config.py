"""`triton-ort config MODEL_DIR`: the config.pbtxt that auto-complete makes of a model folder, offline.

What Triton's auto-complete asks the backend for (triton_ort.autocomplete, the same code the served model
runs), merged into the folder's own config.pbtxt as Triton merges it: max_batch_size, inputs, outputs and
dynamic_batching. Triton then fills in its own defaults (instance_group, version_policy, ...), which a
server's model config endpoint shows and this does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from triton_ort.autocomplete import complete_config, zero_copy_warning
from triton_ort.errors import TritonOrtError
from triton_ort.testing.repository import read_config


class ConfigCommandError(ValueError):
    """A model folder that cannot be completed; the message is one line."""


def _latest_version(model_dir: Path) -> Path:
    versions = sorted((int(p.name), p) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise ConfigCommandError(f"{model_dir} has no version folder (expected e.g. {model_dir / '1'}/)")
    return versions[-1][1]


def _merge(entries: Any, completed: tuple[dict[str, Any], ...]) -> None:
    """Fill each completed tensor into the config's own entry of that name, or add it (ModelConfig.add_*)."""
    by_name = {entry.name: entry for entry in entries}
    for tensor in completed:
        entry = by_name.get(str(tensor["name"])) or entries.add(name=str(tensor["name"]))
        entry.data_type = model_config_pb2.DataType.Value(str(tensor["data_type"]))
        entry.ClearField("dims")
        entry.dims.extend(int(d) for d in tensor["dims"])
        if "optional" in tensor:  # an overridable input (inputs only: ModelOutput has no such field)
            entry.optional = bool(tensor["optional"])


def completed_config(model_dir: Path) -> tuple[model_config_pb2.ModelConfig, str | None]:
    """(the auto-completed config, the zero-copy warning for it or None)."""
    if not (model_dir / "config.pbtxt").is_file():
        raise ConfigCommandError(f"{model_dir / 'config.pbtxt'} does not exist (a model folder has one)")
    try:
        config = read_config(model_dir)
    except (text_format.ParseError, UnicodeDecodeError) as error:
        raise ConfigCommandError(f"{model_dir / 'config.pbtxt'}: {error}") from None
    config.name = config.name or model_dir.resolve().name  # Triton's default: the folder's name
    as_dict = json_format.MessageToDict(config, preserving_proto_field_name=True)
    as_dict.setdefault("max_batch_size", 0)
    try:
        completed = complete_config(as_dict, _latest_version(model_dir))
    except TritonOrtError as error:
        raise ConfigCommandError(f"model {config.name!r}: {error}") from None
    config.max_batch_size = completed.max_batch_size
    _merge(config.input, completed.inputs)
    _merge(config.output, completed.outputs)
    if completed.dynamic_batching:
        config.dynamic_batching.SetInParent()
    # Offline, where the model will run is not known: the warning is given as for a GPU host.
    return config, zero_copy_warning(as_dict, gpu_visible=True)


def config_text(model_dir: Path) -> tuple[str, str | None]:
    config, warning = completed_config(model_dir)
    return text_format.MessageToString(config), warning
