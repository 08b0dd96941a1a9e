"""`triton-ort config MODEL_DIR`: the config a model folder is served with, and the load's refusals, offline.

What it prints is what Triton serves for the fields auto-complete owns: the folder's own config.pbtxt with
what Triton's auto-complete asks the backend for (triton_ort.model.autocomplete, the same code the served
model runs) merged in as Triton merges it: max_batch_size, inputs and outputs (data types, dims, and the
`reshape: { shape: [ ] }` of a tensor that is only the batch axis) and dynamic_batching. Triton then fills
in its own defaults (instance_group, version_policy, optimization, dynamic_batching's
preferred_batch_size, each tensor's unset fields), which a server's model config endpoint shows
(`triton-ort served-config`) and this does not.

Before printing, the folder gets the checks a load makes without a GPU, with the server's own messages:
the launcher's pre-start check (files, version folders, the backend's name, with the closest one for a
misspelt name: triton_ort.harness.checks.check_model), then the model instance's checks of the
completed config (triton_ort.model.load_checks: parameters and optimization, warm-up batch sizes, the hooks
module, inputs, outputs and sequence controls against the ONNX file, custom operators without a library
to register them, and, with --triton-version, BF16 tensors on a python backend that cannot carry them).
Any refusal exits non-zero with the reason the load gives. Not checked here, because they need the
serving host: the execution providers (CUDA, TensorRT, OpenVINO) and ONNX Runtime's own reading of the
whole model (an operator of a known domain, or an IR version, that its onnxruntime does not have; what
a model_operations library registers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from triton_ort.backend import BACKEND_NAME
from triton_ort.errors import TritonOrtError
from triton_ort.harness.checks import PYTHON_BACKENDS, check_model, runs_triton_ort, versions_to_load
from triton_ort.harness.repository import read_config
from triton_ort.hooks.module import load_hooks
from triton_ort.model.autocomplete import complete_config, read_onnx_signature, zero_copy_warning
from triton_ort.model.input_ranges import PARAMETER as INPUT_RANGES
from triton_ort.model.load_checks import (
    BF16_FIRST_RELEASE,
    BF16_FIRST_RELEASE_TEXT,
    bf16_tensors,
    check_operators,
    check_python_backend_types,
    check_tensors,
    checked_options,
)
from triton_ort.model.served_config import ServedConfig


class ConfigCommandError(ValueError):
    """A model folder that the server would refuse; the message is the server's reason (one line, or a
    first line and one line per difference, as the load's error has them)."""


def _merge(entries: Any, completed: tuple[dict[str, Any], ...]) -> None:
    """Fill each completed tensor into the config's own entry of that name, or add it (ModelConfig.add_*),
    with its reshape (triton_ort.model.autocomplete.apply_completed writes it into the served config too)."""
    by_name = {entry.name: entry for entry in entries}
    for tensor in completed:
        entry = by_name.get(str(tensor["name"])) or entries.add(name=str(tensor["name"]))
        entry.data_type = model_config_pb2.DataType.Value(str(tensor["data_type"]))
        entry.ClearField("dims")
        entry.dims.extend(int(d) for d in tensor["dims"])
        if "optional" in tensor:  # an overridable input (inputs only: ModelOutput has no such field)
            entry.optional = bool(tensor["optional"])
        if "reshape" in tensor:
            entry.reshape.SetInParent()  # an empty shape is a reshape too: a tensor that is only the batch
            entry.reshape.ClearField("shape")
            entry.reshape.shape.extend(int(d) for d in tensor["reshape"]["shape"])


def _incomplete_entry(config: model_config_pb2.ModelConfig, completed: bool) -> str:
    """Triton's own check of the config after auto-complete, which an entry can fail: every input and
    output needs a data_type and dims. Triton's message names neither the entry nor why it has none."""
    for kind, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            unset = [repr(field) for field in ("data_type", "dims") if not getattr(entry, field)]
            if not unset:
                continue
            problem = f"config {kind} {entry.name!r} must specify {' and '.join(unset)} (Triton refuses it)"
            if "hooks" in config.parameters:
                return f"{problem}: with hooks, auto-complete fills in what the hooks module declares"
            if completed:  # auto-complete has filled in every entry that the ONNX file has
                return f"{problem}: auto-complete fills in the ONNX file's {kind}s only, not {entry.name!r}"
            return problem
    return ""


def _as_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The config as the backend gets it (JSON of ModelConfig); an unset max_batch_size is 0."""
    as_dict = dict(json_format.MessageToDict(config, preserving_proto_field_name=True))
    as_dict.setdefault("max_batch_size", 0)
    return as_dict


def parse_triton_version(text: str) -> tuple[int, int]:
    """A tritonserver version ('2.41', '2.41.0') or a Triton release ('23.12', as NGC's images are
    tagged) as the server version (2, minor): release YY.MM is 2.(41 + months after 23.12), so 23.12 is
    2.41, 24.08 is 2.49 and 24.10 is 2.51 (Triton's release notes)."""
    try:
        major, minor = (int(part) for part in text.strip().split(".")[:2])
    except ValueError:
        raise ValueError(
            f"{text!r} is not a Triton version such as 2.41 or a release such as 23.12"
        ) from None
    if major == 2:
        return (2, minor)
    if 20 <= major <= 99 and 1 <= minor <= 12:
        return (2, 41 + (major - 23) * 12 + (minor - 12))
    raise ValueError(f"{text!r} is not a Triton version such as 2.41 or a release such as 23.12")


def completed_config(
    model_dir: Path, triton_version: tuple[int, int] | None = None
) -> tuple[model_config_pb2.ModelConfig, list[str]]:
    """(the config the folder is served with, the notes for it: what the load logs about it, and the
    zero-copy warning); ConfigCommandError for a folder the server would not load. `triton_version`: the
    tritonserver that will serve it, where known (what its python backend carries depends on it)."""
    model_dir = model_dir.resolve()  # paths in messages as the server names them
    name = model_dir.name
    problems = check_model(model_dir, PYTHON_BACKENDS)
    if problems:
        raise ConfigCommandError("\n".join(problems))
    config = read_config(model_dir)
    # check_model found them; the newest is completed (a `specific` policy lists them in its own order)
    version = max(versions_to_load(model_dir, config)[0], key=lambda path: int(path.name))
    if not runs_triton_ort(config, version):
        what = f"backend {config.backend!r}" if config.backend else "a config without a backend line"
        raise ConfigCommandError(
            f"model '{name}': {what} is not served by triton_ort; this command completes configs of "
            f'backend "{BACKEND_NAME}" (or backend "python" with triton_ort\'s model.py)'
        )
    config.name = config.name or name  # Triton's default: the folder's name
    written = _as_dict(config)
    try:
        completed = complete_config(written, version)
    except TritonOrtError as error:
        # As in the server: auto-complete leaves the config as written, and the load's checks below fail
        # with the reason (they read the same parameters and file).
        not_completed: TritonOrtError | None = error
    else:
        not_completed = None
        config.max_batch_size = completed.max_batch_size
        _merge(config.input, completed.inputs)
        _merge(config.output, completed.outputs)
        if completed.dynamic_batching:
            config.dynamic_batching.SetInParent()
        if completed.input_ranges is not None:
            config.parameters[INPUT_RANGES].string_value = completed.input_ranges
    if problem := _incomplete_entry(config, completed=not_completed is None):
        raise ConfigCommandError(f"model '{name}': {problem}")
    served = ServedConfig.parse(_as_dict(config))
    try:
        # ModelInstance's checks, in its order, with the ONNX file's graph where the load has its session.
        if triton_version is not None:
            check_python_backend_types(served, carries_bf16=triton_version >= BF16_FIRST_RELEASE)
        options = checked_options(served)
        hooks = load_hooks(version, options)
        inputs, outputs, overridable = read_onnx_signature(version / options.onnx_file)
        notes = list(check_tensors(served, inputs, outputs, hooks, overridable))
        check_operators(version, options)
        if not_completed is not None:
            raise not_completed
    except TritonOrtError as error:
        raise ConfigCommandError(f"model '{name}': {error}") from None
    if triton_version is None and (tensors := bf16_tensors(served)):
        notes.append(
            f"{', '.join(tensors)} {'is' if len(tensors) == 1 else 'are'} BF16, which the python backend "
            f"carries from {BF16_FIRST_RELEASE_TEXT} on (an earlier server refuses the load); this command "
            "does not know which release will serve the model: --triton-version 23.12 (or 2.41) checks it"
        )
    # Offline, where the model will run is not known: the warning is given as for a GPU host.
    if warning := zero_copy_warning(written, gpu_visible=True):
        notes.append(warning)
    return config, notes


def config_text(model_dir: Path, triton_version: tuple[int, int] | None = None) -> tuple[str, list[str]]:
    """The completed config as config.pbtxt text, and the notes to print after it."""
    config, notes = completed_config(model_dir, triton_version)
    return text_format.MessageToString(config), notes
