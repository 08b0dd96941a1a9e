"""Fill in config.pbtxt from the ONNX file: inputs, outputs, data types, dims and max_batch_size.

Triton calls the model's `auto_complete_config` before any instance exists (unless the server runs with
--disable-auto-complete-config), so this reads the graph with the `onnx` package, not an ORT session: no
device, no execution provider, no weights beyond the graph's own protobuf.

Policy, following onnxruntime_backend's autocomplete (src/onnxruntime.cc, AutoCompleteMaxBatch) where it
applies to a config that may already be partly written:
- A model can batch when every input and output that the completed config serves has a first axis that
  the ONNX file leaves open (a symbolic name such as `batch`, or unknown). The native backend's rule
  (onnxruntime.cc AutoCompleteMaxBatch: `(dims.size() == 0) || (dims[0] != -1)` on any input or output
  means no batching) runs over the session's inputs (onnxruntime_utils.cc InputInfos:
  SessionGetInputCount), which are ONNX Runtime's required inputs, initializers excluded
  (inference_session.cc SaveModelMetadata: `graph.GetInputs(); // inputs excluding initializers`); its
  auto-complete lists only those (AutoCompleteIO over the same infos), so a request there cannot send an
  overridable initializer at all. Here such an input is served (optional, below), so it is one of the
  inputs the rule runs over: a fixed-size default such as `scale [1]` keeps the model unbatched, and the
  request written from the ONNX file (`x [3, 4]`, `scale [1]`) is the request Triton takes.
- max_batch_size: kept when the config sets it. When it does not (0) and the model can batch, it becomes
  DEFAULT_MAX_BATCH_SIZE, as the native backend's default-max-batch-size, unless the config's own input or
  output dims already spell out the full ONNX rank (that config means "no batch axis": it stays 0).
- dynamic_batching is switched on when max_batch_size ends up above 1 and no scheduler is configured.
- Inputs: every ONNX input. Outputs: every ONNX output when the config lists none; when it lists some, those
  are the outputs served (a deliberate subset), and only their missing fields are filled.
- Dims leave out the batch axis when max_batch_size > 0; an open axis is -1. A tensor that is only the
  batch axis (an ONNX shape [N], such as a scikit-learn classifier's label) gets `dims: [1]` and
  `reshape: { shape: [] }`, as the native backend writes it (onnxruntime.cc, AutoCompleteIO): Triton refuses
  empty dims, and applies the reshape itself on the way in and out.
- An explicit `max_batch_size: 0` reads as unset (protobuf cannot tell them apart), as in the native
  backend, which logs a warning when it fills one in; so does this.
- Inputs that the sequence batcher supplies (its control inputs) are not request inputs: left out.
- An ONNX input that has an initializer of its name (IR >= 4; ONNX Runtime's overridable initializers: a
  default that a request may replace, such as a threshold, a scale or a `past` state) is an input with
  `optional: true`: a request that sends it gets its value, one that does not gets the file's. Its dims
  are those of any input when its first axis is open (it is batched); otherwise (a scalar or a fixed
  size: one value per request, signature.one_value_per_request) they are its whole shape. Such an
  input keeps max_batch_size 0 unless the config sets it; only where the config sets it (> 0) does a
  request send that value in each of its rows (said at load and by `triton-ort config`:
  load_checks.one_value_inputs_note).
  Before IR 4 every weight is a graph input, and ONNX Runtime lets none be overridden: left out.
- What the config states is kept as it is, even where the ONNX file contradicts it: ModelInstance checks
  the completed config against the file at load (signature.check_config) and lists every difference.
  Auto-complete itself never fails on a conflict, because Triton's python backend 23.12 left the load
  hanging when auto_complete_config raised while another model of the backend was running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import onnx

from ..errors import ConfigError
from . import input_ranges
from .dtypes import ELEMENT_TYPES, ZIPMAP_HINT, ElementType, from_onnx_type
from .hooks_file import hook_functions, import_hooks_file, read_declarations, undeclared_message
from .input_ranges import format_ranges, index_ranges
from .onnx_files import read_onnx_file
from .options import parameters_from_model_config, parse_options
from .sequence import control_inputs
from .served_config import ConfigTensor
from .signature import Dim, OnnxSignature, TensorSpec, one_value_per_request

LOGGER = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_SIZE = 4
"""max_batch_size given to a batchable model whose config does not set one (the native ONNX Runtime
backend's default-max-batch-size). Set max_batch_size in config.pbtxt for larger batches."""

FORCE_CPU_ONLY_INPUT_TENSORS = "FORCE_CPU_ONLY_INPUT_TENSORS"
ZERO_COPY_LINE = 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }'
"""The config line that lets GPU inputs reach the model on the GPU. Auto-complete cannot add it. The stub
sends back the whole completed JSON (python_backend r23.12 src/pb_stub.cc:486-487), but Triton core keeps
only its max_batch_size, inputs, outputs, scheduler and model_transaction_policy (core r23.12
src/backend_model.cc:684-737, TritonModel::UpdateModelConfig; r24.10 :741-794); and the python backend reads
the parameter once, in its ModelState constructor, before auto-complete runs (python_backend r23.12
src/python_be.cc:1879-1894 and :1899-1990; r24.10 :1756-1771 and :1776-1870). Measured on 2.41: parameters
put into the completed config are served as `"parameters": {}`."""

_BY_PROTO: dict[int, ElementType] = {t.onnx_proto: t for t in ELEMENT_TYPES}
_SCHEDULERS = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")


@dataclass(frozen=True)
class CompletedConfig:
    """What auto-complete adds to a config, in the terms of pb_utils.ModelConfig's setters."""

    max_batch_size: int
    inputs: tuple[dict[str, Any], ...]
    """Entries for ModelConfig.add_input: name, data_type (TYPE_...), dims (without the batch axis),
    `reshape` ({"shape": []}) for a tensor that is only the batch axis, and `optional` (True) for an
    overridable input."""
    outputs: tuple[dict[str, Any], ...]
    dynamic_batching: bool
    """Whether to call ModelConfig.set_dynamic_batching."""
    input_ranges: str | None = None
    """The parameter input_ranges the graph gives (triton_ort.model.input_ranges), where the config sets none:
    `triton-ort config` prints it for config.pbtxt. Not sent to Triton, which takes only max_batch_size,
    inputs, outputs and batching from an auto-completed config (core TritonModel::UpdateModelConfig)."""


def _element_type(value_info: onnx.ValueInfoProto, where: str) -> ElementType:
    if not value_info.type.HasField("tensor_type"):
        kind = value_info.type.WhichOneof("value") or "unknown"
        hint = f"; {ZIPMAP_HINT}" if kind in ("sequence_type", "map_type") else ""
        raise ConfigError(
            f"{where} is a {kind.removesuffix('_type')}, not a tensor; only tensors are served{hint}"
        )
    proto = value_info.type.tensor_type.elem_type
    if proto == onnx.TensorProto.STRING:
        return from_onnx_type("tensor(string)", where)  # the one message for string tensors
    if proto not in _BY_PROTO:
        name = onnx.TensorProto.DataType.Name(proto) if proto in onnx.TensorProto.DataType.values() else proto
        supported = ", ".join(t.triton_name for t in ELEMENT_TYPES)
        raise ConfigError(f"{where} has ONNX element type {name}, not served; supported: {supported}")
    return _BY_PROTO[proto]


def _shape(value_info: onnx.ValueInfoProto) -> tuple[Dim, ...]:
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise ConfigError(
            f"ONNX tensor {value_info.name!r} has no shape in the graph (its rank is unknown); "
            "write its dims in config.pbtxt, or export the model with shapes"
        )
    dims: list[Dim] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or None)
    return tuple(dims)


def read_onnx_signature(path: Path) -> OnnxSignature:
    """The tensors of an ONNX file's graph, without loading external weights."""
    return onnx_signature(read_onnx_file(path))


def onnx_signature(model: onnx.ModelProto) -> OnnxSignature:
    """The tensors of a model's graph: inputs, outputs, and initializers a request may override."""
    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    # Models exported with IR < 4 list every weight as a graph input too; ONNX Runtime overrides none of
    # them (InferenceSession.get_overridable_initializers() is empty), so neither does a request.
    overridable_ir = model.ir_version >= 4

    def spec(value_info: onnx.ValueInfoProto, kind: str) -> TensorSpec:
        where = f"ONNX {kind} {value_info.name!r}"
        element_type = _element_type(value_info, where)
        default = weights.get(value_info.name)
        if default is not None and not value_info.type.tensor_type.HasField("shape"):
            shape: tuple[Dim, ...] = tuple(int(d) for d in default.dims)  # the default's own shape
        else:
            shape = _shape(value_info)
        return TensorSpec(value_info.name, element_type, shape)

    inputs = tuple(spec(v, "input") for v in graph.input if v.name not in weights)
    outputs = tuple(spec(v, "output") for v in graph.output)
    overridable = tuple(spec(v, "input") for v in graph.input if v.name in weights and overridable_ir)
    return OnnxSignature(inputs, outputs, overridable)


def can_batch(specs: tuple[TensorSpec, ...]) -> bool:
    """Every tensor has a first axis that the file leaves open, so Triton may put the batch there."""
    return all(len(spec.shape) > 0 and not isinstance(spec.shape[0], int) for spec in specs)


def _config_ranks(model_config: Mapping[str, Any], specs: Mapping[str, TensorSpec]) -> set[str]:
    """For each configured entry that has dims: 'full' if they have the ONNX rank, 'batched' if one less."""
    seen = set()
    for written in [*model_config.get("input", []), *model_config.get("output", [])]:
        entry = ConfigTensor.parse(written)
        spec = specs.get(entry.name)
        dims = entry.served_dims
        if spec is None or not (dims or entry.reshape is not None):
            continue
        if len(dims) == len(spec.shape):
            seen.add("full")
        elif len(dims) == len(spec.shape) - 1:
            seen.add("batched")
    return seen


def _max_batch_size(
    model_config: Mapping[str, Any],
    inputs: tuple[TensorSpec, ...],
    outputs: tuple[TensorSpec, ...],
    overridable: tuple[TensorSpec, ...] = (),
) -> int:
    """The config's max_batch_size, or where it sets none, the native backend's choice over the tensors
    the completed config serves: the required inputs, the overridable ones and the outputs."""
    configured = int(model_config.get("max_batch_size", 0))
    if configured > 0 or not can_batch(inputs + overridable + outputs):
        return configured  # a wrong one (fixed first axis) is reported by check_config
    ranks = _config_ranks(model_config, {spec.name: spec for spec in inputs + overridable + outputs})
    if ranks == {"full"}:
        return 0  # the config describes whole tensors: it wants no batch axis
    # The native backend's warning (onnxruntime.cc, AutoCompleteMaxBatch), with how to say "no batching".
    LOGGER.warning(
        "autofilled max_batch_size to %d for model '%s' since batching is supported but no max_batch_size "
        "is specified in model configuration (an explicit max_batch_size: 0 reads as unspecified). Must "
        "specify max_batch_size to utilize autofill with a larger max batch size; for a model that must "
        "not batch, write max_batch_size: 0 and its inputs' dims with the batch axis, e.g. dims: [ -1, ... ]",
        DEFAULT_MAX_BATCH_SIZE,
        model_config.get("name", ""),
    )
    return DEFAULT_MAX_BATCH_SIZE


def _dims(spec: TensorSpec, max_batch_size: int) -> list[int]:
    shape = spec.shape[1:] if max_batch_size > 0 else spec.shape
    return [d if isinstance(d, int) else -1 for d in shape]


def _optional_entry(
    spec: TensorSpec, configured: Mapping[str, Any] | None, max_batch_size: int
) -> dict[str, Any]:
    """An overridable input's entry: optional unless the config lists it without `optional: true` (its
    own entry is kept: pb_utils refuses to change what the config states, and Triton's JSON of a written
    entry says `"optional": false`). One value per request: dims of its whole shape."""
    batched = max_batch_size if not one_value_per_request(spec) else 0
    entry = _entry(spec, configured, batched)
    entry["optional"] = True if configured is None else bool(configured.get("optional", False))
    return entry


def _entry(spec: TensorSpec, configured: Mapping[str, Any] | None, max_batch_size: int) -> dict[str, Any]:
    """The complete entry: the config's own data_type and dims where it has them, the file's elsewhere."""
    data_type = str((configured or {}).get("data_type") or "TYPE_INVALID")
    dims = [int(d) for d in (configured or {}).get("dims") or []]
    entry: dict[str, Any] = {
        "name": spec.name,
        "data_type": spec.element_type.config_name if data_type == "TYPE_INVALID" else data_type,
        "dims": dims or _dims(spec, max_batch_size),
    }
    if not entry["dims"]:  # Triton refuses empty dims
        entry["dims"] = [1]
        if max_batch_size > 0 and (configured or {}).get("reshape") is None:
            entry["reshape"] = {"shape": []}  # Triton refuses an empty reshape without batching
    return entry


def complete_config(model_config: Mapping[str, Any], version_dir: Path) -> CompletedConfig:
    """The config's missing inputs, outputs and max_batch_size, read from its ONNX file.

    Raises ConfigError for a bad parameter or an unreadable ONNX file. Entries the config states are
    returned unchanged (pb_utils.ModelConfig refuses to change them); conflicts with the file are for
    signature.check_config."""
    options = parse_options(parameters_from_model_config(model_config))
    if options.hooks:
        return complete_from_hooks(model_config, version_dir / options.hooks)
    model = read_onnx_file(version_dir / options.onnx_file)
    inputs, outputs, overridable = onnx_signature(model)
    max_batch_size = _max_batch_size(model_config, inputs, outputs, overridable)
    ranges = (
        index_ranges(model) if input_ranges.PARAMETER not in (model_config.get("parameters") or {}) else {}
    )

    configured_inputs = {str(e["name"]): e for e in model_config.get("input", [])}
    configured_outputs = {str(e["name"]): e for e in model_config.get("output", [])}
    controls = control_inputs(model_config)
    completed_inputs = [
        _entry(spec, configured_inputs.get(spec.name), max_batch_size)
        for spec in inputs
        if spec.name not in controls
    ] + [_optional_entry(spec, configured_inputs.get(spec.name), max_batch_size) for spec in overridable]
    served_outputs = [s for s in outputs if not configured_outputs or s.name in configured_outputs]
    completed_outputs = [_entry(s, configured_outputs.get(s.name), max_batch_size) for s in served_outputs]

    has_scheduler = any(key in model_config for key in _SCHEDULERS)
    return CompletedConfig(
        max_batch_size=max_batch_size,
        inputs=tuple(completed_inputs),
        outputs=tuple(completed_outputs),
        dynamic_batching=max_batch_size > 1 and not has_scheduler,
        input_ranges=format_ranges(ranges) if ranges else None,
    )


def complete_from_hooks(model_config: Mapping[str, Any], hooks_path: Path) -> CompletedConfig:
    """A hooked model's config, completed from what its hooks module declares (INPUTS and OUTPUTS,
    model/hooks_file.py): hooks may rename, cast and reshape, so the ONNX file cannot tell what clients
    see. The rules are those of a model without hooks, over the declared tensors in place of the file's:
    max_batch_size and dynamic batching from their first axes, the config's own entries kept, the config's
    outputs (when it lists some) the ones served, declared optional inputs `optional: true`.

    Without declarations the config is served as written; one that lists no inputs and no outputs is
    refused (ConfigError: the one line of hooks_file.undeclared_message, which the load gives too)."""
    module = import_hooks_file(hooks_path)  # imported and checked as the load (hooks.module.Hooks.load) does
    declared = read_declarations(module, hooks_path)
    hook_functions(module, hooks_path)
    if declared is None:
        if not model_config.get("input") and not model_config.get("output"):
            raise ConfigError(undeclared_message(hooks_path))
        return CompletedConfig(int(model_config.get("max_batch_size", 0)), (), (), dynamic_batching=False)
    max_batch_size = _max_batch_size(model_config, declared.inputs + declared.optional, declared.outputs)
    configured_inputs = {str(e["name"]): e for e in model_config.get("input", [])}
    configured_outputs = {str(e["name"]): e for e in model_config.get("output", [])}
    inputs = [_entry(spec, configured_inputs.get(spec.name), max_batch_size) for spec in declared.inputs]
    for spec in declared.optional:
        entry = _entry(spec, configured_inputs.get(spec.name), max_batch_size)
        configured = configured_inputs.get(spec.name)
        entry["optional"] = True if configured is None else bool(configured.get("optional", False))
        inputs.append(entry)
    served = [s for s in declared.outputs if not configured_outputs or s.name in configured_outputs]
    outputs = [_entry(s, configured_outputs.get(s.name), max_batch_size) for s in served]
    has_scheduler = any(key in model_config for key in _SCHEDULERS)
    return CompletedConfig(
        max_batch_size=max_batch_size,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        dynamic_batching=max_batch_size > 1 and not has_scheduler,
    )


class AutoCompleteModelConfig(Protocol):
    """What of pb_utils.ModelConfig auto-complete uses (python_backend triton_python_backend_utils.py)."""

    def as_dict(self) -> dict[str, Any]: ...

    def set_max_batch_size(self, max_batch_size: int) -> None: ...

    def add_input(self, input: dict[str, Any]) -> None: ...  # pb_utils names it `input`

    def add_output(self, output: dict[str, Any]) -> None: ...

    def set_dynamic_batching(self) -> None: ...


def apply_completed(target: AutoCompleteModelConfig, completed: CompletedConfig) -> None:
    """Write a CompletedConfig into Triton's auto-complete object.

    add_input/add_output take only name, data_type, dims (and optional) on every python backend from 23.12
    to 24.10 and main (triton_python_backend_utils.py, their `valid_properties`): a `reshape` key makes them
    raise. The stub sends back the whole dictionary that as_dict() returns, not a copy (pb_stub.cc r23.12,
    AutoCompleteModelConfig: json.dumps(model_config._model_config)), so the reshape is written into the
    entry there. Were a later release to hand out a copy, the reshape would be lost and the load would fail
    in signature.check_config naming the line to add: a refused load, never a wrong answer."""
    target.set_max_batch_size(completed.max_batch_size)
    for kind, entries, add in (
        ("input", completed.inputs, target.add_input),
        ("output", completed.outputs, target.add_output),
    ):
        for entry in entries:
            add({key: value for key, value in entry.items() if key != "reshape"})
            if "reshape" in entry:
                for written in target.as_dict().get(kind, []):
                    if written.get("name") == entry["name"] and written.get("reshape") is None:
                        written["reshape"] = entry["reshape"]
    if completed.dynamic_batching:
        target.set_dynamic_batching()


def _may_run_on_gpu(model_config: Mapping[str, Any]) -> bool:
    """Whether Triton may give the model GPU instances: no instance_group (one instance per GPU where there
    are GPUs), or a group that is not KIND_CPU (KIND_GPU, or KIND_AUTO, which resolves to GPU there)."""
    groups = model_config.get("instance_group") or []
    return not groups or any(str(g.get("kind") or "KIND_AUTO") != "KIND_CPU" for g in groups)


def zero_copy_warning(model_config: Mapping[str, Any], gpu_visible: bool | Callable[[], bool]) -> str | None:
    """The one warning for a model on a GPU host whose config leaves FORCE_CPU_ONLY_INPUT_TENSORS unset:
    the python backend then copies every GPU input (CUDA shared memory, an upstream GPU model) to the host,
    and this backend copies it back. None where that cannot happen or the config decides it. A callable
    `gpu_visible` is asked last, only for a model that may run on a GPU (the stub's asks torch)."""
    parameters = model_config.get("parameters") or {}
    if FORCE_CPU_ONLY_INPUT_TENSORS in parameters or not _may_run_on_gpu(model_config):
        return None
    if not (gpu_visible() if callable(gpu_visible) else gpu_visible):
        return None
    return (
        f"model {model_config.get('name')!r}: GPU inputs (CUDA shared memory, an upstream GPU model) are "
        "copied to the host and back, because the python backend forces CPU inputs unless config.pbtxt says "
        f"otherwise (auto-complete cannot set it); for zero-copy, add to config.pbtxt: {ZERO_COPY_LINE}"
    )
