"""The checks a model's load makes of its config.pbtxt and its files that need no session and no device.

One place for both callers, in the order a load makes them: ModelInstance and ModelPlan.build at load
(the tensors checked are the ONNX Runtime session's) and `triton-ort config` offline (the ONNX file's
graph, read without a session: triton_ort.model.autocomplete.read_onnx_signature). So the offline command
refuses a folder with the reason the server's load gives. What needs the serving host (a GPU, its execution
providers, ONNX Runtime reading the whole model) is checked at load only.

Importing this module imports no ONNX Runtime (the offline command needs none). A model's hooks module is
loaded by hooks.module.load_hooks; the checks here take what it loaded.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from .dtypes import from_triton_type
from .hooks_file import HookedModel, undeclared_message
from .options import ModelOptions, parse_options
from .served_config import ServedConfig
from .signature import TensorSpec, check_config, one_value_per_request, shape_text

LOGGER = logging.getLogger(__name__)


def check_warmup_batch_sizes(batch_sizes: Sequence[int], max_batch_size: int) -> None:
    """The `warmup` parameter's batch sizes must be ones Triton could send this model."""
    if max_batch_size > 0:
        too_large = [size for size in batch_sizes if size > max_batch_size]
        if too_large:
            raise ConfigError(
                f"parameter 'warmup': batch size {too_large[0]} is above max_batch_size {max_batch_size} "
                f"(expected batch sizes from 1 to {max_batch_size})"
            )
    elif any(size != 1 for size in batch_sizes):
        raise ConfigError(
            f"parameter 'warmup': batch sizes {','.join(map(str, batch_sizes))} need a batch axis, but "
            "max_batch_size is 0 (expected true or false for this model)"
        )


BF16_FIRST_RELEASE = (2, 49)
"""The first tritonserver whose python backend carries BF16 tensors (release 24.08): python_backend
2b12abe "Add BF16 tensor support via dlpack" (r24.08 src/pb_stub_utils.cc triton_to_dlpack_type and
dlpack_to_triton_type, src/pb_tensor.cc no numpy array for BF16). Up to r24.07 the stub builds a numpy
array for every CPU tensor it receives and throws "TYPE_BF16 not currently supported."
(r23.12 src/pb_stub_utils.cc:170-171, triton_to_pybind_dtype), and has no DLPack code for BF16."""
BF16_FIRST_RELEASE_TEXT = "Triton 24.08 (tritonserver 2.49)"


def bf16_tensors(config: ServedConfig) -> list[str]:
    """The config's BF16 inputs and outputs ("input 'x'"): the tensors the python backend must carry."""
    return [
        f"{kind} {entry.name!r}"
        for kind, entries in (("input", config.inputs), ("output", config.outputs))
        for entry in entries
        if entry.data_type.removeprefix("TYPE_") == "BF16"
    ]


def check_python_backend_types(config: ServedConfig, carries_bf16: bool) -> None:
    """A BF16 input or output on a python backend that cannot carry BF16 (before 24.08) would load and
    then have every request refused; the load is refused instead, naming the tensor and the release."""
    tensors = bf16_tensors(config)
    if tensors and not carries_bf16:
        raise ConfigError(
            f"{', '.join(tensors)} {'is' if len(tensors) == 1 else 'are'} BF16, which this server's python "
            "backend cannot carry (every request would be refused: 'TYPE_BF16 not currently supported'); "
            f"BF16 tensors are served from {BF16_FIRST_RELEASE_TEXT} on: serve the model there, or give "
            "the model FP16 or FP32 at that tensor (a Cast inside the graph)"
        )


def checked_options(config: ServedConfig) -> ModelOptions:
    """The model's options (parameters and optimization, triton_ort.model.options) as the load reads them from
    the completed config, with the warm-up batch sizes checked against its max_batch_size."""
    options = parse_options(config.parameters, config.optimization)
    check_warmup_batch_sizes(options.warmup, config.max_batch_size)
    return dataclasses.replace(options, op_libraries=config.op_libraries)


def check_operators(version_dir: Path, options: ModelOptions) -> None:
    """model_operations' op libraries given by absolute paths exist; without any, a node of a domain ONNX
    Runtime does not implement is refused naming it (custom_ops.check_custom_operators). The load says
    the same from ONNX Runtime's own refusal (session.py), so a model ORT reads is read once."""
    from .custom_ops import check_custom_operators, check_op_libraries

    check_op_libraries(options.op_libraries)
    check_custom_operators(
        version_dir / options.onnx_file, options.op_libraries, tensorrt=options.tensorrt_options is not None
    )


def check_tensors(
    config: ServedConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    hooks: HookedModel | None,
    overridable: Sequence[TensorSpec] = (),
) -> tuple[str, ...]:
    """config.pbtxt against the ONNX file's inputs and outputs (signature.check_config; `overridable`:
    the inputs a request may send), or, with hooks, on the sides no hook stands on, and no string tensor
    on either side. Returns the notes the load logs (at INFO) and `triton-ort config` prints:
    one_value_inputs_note."""
    if hooks is None:
        check_config(config, inputs, outputs, overridable)
        note = one_value_inputs_note(config, overridable)
        if note:
            LOGGER.info("model %r: %s", config.name, note)
        return (note,) if note else ()
    _refuse_strings_around_hooks(config, hooks, (*inputs, *outputs))
    _check_config_around_hooks(config, hooks, inputs, outputs)
    return ()


def _refuse_strings_around_hooks(
    config: ServedConfig, hooks: HookedModel, model_tensors: Sequence[TensorSpec]
) -> None:
    """Hooks take and return torch tensors: a model with string tensors (the model's or the client's, which
    are config.pbtxt's) cannot have them."""
    client = [
        from_triton_type(entry.data_type, f"config tensor {entry.name!r}")
        for entry in (*config.inputs, *config.outputs)
    ]
    if any(spec.element_type.is_string for spec in model_tensors) or any(t.is_string for t in client):
        raise ConfigError(
            f"hooks ({hooks.path}) take and return torch tensors, and this model has string tensors; "
            "serve it without the hooks parameter"
        )


def _check_config_around_hooks(
    config: ServedConfig,
    hooks: HookedModel,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
) -> None:
    """The load-time check of config.pbtxt against the ONNX file's `inputs` and `outputs`, for the sides
    no hook stands on: the inputs when there is no preprocess, the outputs when there is no postprocess. A
    hook may change names, dtypes and shapes, so its side is checked on each run instead (HookedRunner).
    A config without inputs or outputs (the hooks module declares none, or auto-complete did not run) is
    refused: the model would be ready with a signature no client can call."""
    if not config.inputs or not config.outputs:
        missing = " and ".join(
            kind for kind, listed in (("inputs", config.inputs), ("outputs", config.outputs)) if not listed
        )
        if hooks.declared is None:
            raise ConfigError(undeclared_message(hooks.path, missing))
        raise ConfigError(
            f"config.pbtxt lists no {missing}, though hooks module {hooks.path} declares them: auto-complete "
            "did not run (tritonserver --disable-auto-complete-config?); write them in config.pbtxt"
        )
    if hooks.declared is not None and config.batched:
        declared = (*hooks.declared.inputs, *hooks.declared.optional, *hooks.declared.outputs)
        fixed = [spec.name for spec in declared if not spec.shape or isinstance(spec.shape[0], int)]
        if fixed:
            raise ConfigError(
                f"hooks module {hooks.path} declares {fixed} without an open first axis, but max_batch_size "
                f"is {config.max_batch_size}: declare the batch axis as -1 (e.g. [-1, 2010]), or set "
                "max_batch_size: 0"
            )
    if hooks.preprocess is None:
        check_config(config.with_tensors(outputs=()), inputs, ())
    if hooks.postprocess is None:
        check_config(config.with_tensors(inputs=()), (), outputs)


def one_value_inputs_note(config: ServedConfig, overridable: Sequence[TensorSpec]) -> str | None:
    """The one line for a config that sets max_batch_size over overridable inputs of one value per
    request (a default with no open first axis, such as a `scale [1]`): auto-complete leaves such a model
    unbatched, as the native backend would with every input it serves, so only a config's own
    max_batch_size batches it, and then the request sends each such input with a batch axis, its one value
    in every row. None where no such input is served."""
    listed = {entry.name for entry in config.inputs}
    one_value = [s for s in overridable if s.name in listed and one_value_per_request(s)]
    if not config.batched or not one_value:
        return None
    shapes = ", ".join(f"{s.name!r} as {shape_text(('rows', *(s.shape or (1,))))}" for s in one_value)
    return (
        f"max_batch_size {config.max_batch_size} is set in config.pbtxt, so the inputs of one value per "
        f"request (an overridable default without a batch axis) are sent with a batch axis, that value in "
        f"every row: {shapes}; without max_batch_size the model is not batched and requests send them in "
        "the ONNX file's shape"
    )
