"""Model options, read from config.pbtxt `parameters` and `optimization`.

The vocabulary is that of Triton's native onnxruntime backend (its README and src/onnxruntime.cc), with the
same names, value formats and meanings, so a config written for `backend: "onnxruntime"` loads here with
only the backend line changed; docs/native-ort-options.md has the table. Our older spellings are accepted
as deprecated aliases (a warning names the native one), and a config that gives both spellings of one
option is refused.

Every key has a validated default; an unknown key, a bad value, or an option that cannot apply in the python
backend fails the load with a message that names the key, the value and what is accepted, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from .input_ranges import PARAMETER as INPUT_RANGES
from .input_ranges import parse_ranges

LOGGER = logging.getLogger(__name__)

# Keys the python backend itself reads from the same `parameters` block; they are not ours to reject.
BACKEND_KEYS = frozenset({"FORCE_CPU_ONLY_INPUT_TENSORS", "EXECUTION_ENV_PATH"})

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
# optimization.graph.level as the native backend maps it (src/onnxruntime.cc, ModelState::ModelState):
# -1 basic, 1 extended, 2 disable all, anything else all. We accept only the four documented values.
NATIVE_GRAPH_LEVELS = {-1: "basic", 0: "all", 1: "extended", 2: "disable"}
ARENA_EXTEND_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")
CUDNN_CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
EXECUTION_MODES = ("sequential", "parallel")
OUTPUT_PLACEMENTS = ("auto", "device", "host")
PRECISION_MODES = {
    "FP32": None,
    "FP16": "trt_fp16_enable",
    "BF16": "trt_bf16_enable",
    "INT8": "trt_int8_enable",
}
# Up to this many output bytes per ORT run, handing outputs back from pinned host memory is faster than
# from the device through the python backend. Measured on an H200 with Triton 2.51 (docs/benchmarks.md,
# `client.bench --crossover`): host faster at 64 KiB, device faster from 256 KiB on.
DEFAULT_HOST_OUTPUT_MAX_BYTES = 131072
# A GPU instance's per-thread stack limit (cuda_context.py): CUDA's default 1024 bytes reserves 248 MiB more
# of an H200 per process than 64 does; no kernel of the demo's load, warm-up and gathered runs raised it
# (diagnostics.bench_memory, 2026-12-05; docs/benchmarks.md, "Choosing the instance count").
DEFAULT_CUDA_STACK_BYTES = 64


@dataclass(frozen=True)
class ModelOptions:
    onnx_file: str = "model.onnx"
    """Path of the ONNX file, relative to the model's version directory."""
    op_libraries: tuple[str, ...] = ()
    """Custom-op libraries registered before the session is created: config.pbtxt's
    model_operations.op_library_filename (not a parameter; load_checks.checked_options sets it)."""
    hooks: str = ""
    """Path of a Python module with preprocess/postprocess hooks, relative to the version directory;
    empty: none (docs/hooks.md)."""
    allow_cpu_fallback: bool = False
    """On a GPU instance whose CUDA EP cannot load: run on CPU with a warning instead of failing the load."""
    allow_cuda_fallback: bool = False
    """On a GPU instance whose TensorRT EP cannot load: run on the CUDA EP with a warning instead of
    failing the load."""
    gather_requests: bool | None = None
    """Concatenate the requests of one execute() into one ORT run when their shapes allow it. None
    (`auto`): unless the graph mixes rows across the batch axis (row_mixing.py), whose requests then run
    one per ORT run; True (`yes`) and False (`no`) decide it for every graph."""
    gather_after_preprocess: bool | None = None
    """With hooks: requests of different shapes in one execute are pre-processed per shape and, where the
    results agree, run through ORT once (HookedRunner.run_groups). None (`auto`): on CPU instances only,
    since on a GPU it has not run on the GPU host yet; True and False decide it for every instance."""
    pinned_staging: bool = True
    """CPU inputs for a GPU instance go through pinned host memory (faster, asynchronous DMA)."""
    output_placement: str = "auto"
    """GPU instances: where outputs are handed to Triton. 'device' keeps them on the GPU (no copy),
    'host' copies them once into pinned host memory, 'auto' picks 'host' for runs whose output bytes are at
    most host_output_max_bytes (a GPU hand-back costs a fixed ~0.45 ms that small outputs do not repay)."""
    host_output_max_bytes: int = DEFAULT_HOST_OUTPUT_MAX_BYTES
    """The 'auto' crossover, in bytes of output per ORT run."""
    cuda_stack_bytes: int = DEFAULT_CUDA_STACK_BYTES
    """GPU instances: the CUDA context's per-thread stack limit, set at load (cuda_context.py); a kernel
    that needs more raises it at its launch. 0 keeps CUDA's default (1024 bytes)."""
    cuda_graph: bool = False
    """GPU instances: capture the model as ORT CUDA graphs (one per input shape, at most 32) and replay
    them, which saves kernel-launch time; inputs and outputs are copied through fixed buffers."""
    inflight_lanes: int = 0
    """Requests kept in flight by one instance (Triton 2.47 and later; runtime/inflight.py): K lanes, each
    a thread with its own runner (and on a GPU its own session and CUDA stream), answer requests through
    their response senders while execute() only queues them. 0 (or 1 on an earlier release): the classic
    execute, which answers its requests before it returns."""
    custom_metrics: bool | None = None
    """The instance's own Prometheus metrics (runtime/metrics.py, docs/metrics.md). Off, the stub sends the
    server no metric message: on Triton 2.41, whose python backend restarts a stub that dies, those messages
    make the server crash in that restart nearly every time (docs/reliability.md). None (`auto`): on where
    the python backend restarts no stub (2.47 and later, found at the first execute), off before."""
    warmup: tuple[int, ...] = (1,)
    """Batch sizes run once each at load, before the model reports ready (zeros; other variable axes 1),
    so the first requests do not pay for cuBLAS/cuDNN initialisation (about 100 ms on a GPU) or for ORT's
    first allocation at each size. Written `true` (= 1), `false` (none), or a list such as `1,8,64`."""
    gpu_mem_limit: int = 0
    """Bytes the CUDA EP's arena may hold; 0 = no limit."""
    arena_extend_strategy: str = "kSameAsRequested"
    """How the CUDA EP's arena grows: by what a run asks, not to the next power of two (ORT's and the native
    backend's default), which on the H200 held 256 MiB less per mlp4096 instance at the same c=16 req/s
    (diagnostics.bench_memory; docs/benchmarks.md "Choosing the instance count")."""
    cudnn_conv_algo_search: str = "HEURISTIC"
    """How cuDNN picks a convolution's algorithm. Not ORT's and the native backend's EXHAUSTIVE: served with
    gathered batches, whose sizes vary from run to run, EXHAUSTIVE ran the convolutional pipelines 4.8-4.9x
    slower at c=16 in steady state than HEURISTIC, with shapes warmed or not (H100, 2026-12-06;
    docs/pipelines.md). A model whose batches keep one shape may still gain from EXHAUSTIVE: set it."""
    graph_optimization_level: str = "all"
    intra_op_num_threads: int = 0
    """0 lets ORT choose (one per physical core)."""
    inter_op_num_threads: int = 0
    execution_mode: str = "sequential"
    enable_mem_arena: bool | None = None
    """ORT's CPU memory arena; None leaves ORT's default (on)."""
    enable_mem_pattern: bool | None = None
    """ORT's memory pattern planning; None leaves ORT's default (on)."""
    use_device_allocator_for_initializers: bool | None = None
    allow_spinning: bool | None = None
    """ORT's session.intra_op.allow_spinning (idle pool threads spin for more work); None: off on CPU
    instances (ModelInstance), ORT's default (on) elsewhere."""
    arena_shrinkage: str = ""
    """Run option memory.enable_memory_arena_shrinkage on every run, e.g. "cpu:0;gpu:0"; empty: none."""
    cuda_options: Mapping[str, str] = field(default_factory=dict)
    """Further CUDA EP options (ORT's names and values), from gpu_execution_accelerator "cuda"."""
    tensorrt_options: Mapping[str, str] | None = None
    """TensorRT EP options (ORT's trt_* names), from gpu_execution_accelerator "tensorrt"; None: no
    TensorRT."""
    openvino: bool = False
    """cpu_execution_accelerator "openvino": the OpenVINO EP on CPU (needs the onnxruntime-openvino build)."""


# --- value parsers: (what, raw) -> value; `what` names the key where it is (e.g. "parameter 'x'"), and
# every error names it, the value and what is accepted -------


# The native backend accepts true/on/1 and false/off/0 in any case (backend_common.cc ParseBoolValue).
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(what: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE_WORDS:
        return True
    if lowered in _FALSE_WORDS:
        return False
    raise ConfigError(f"{what}: {raw!r} is not a boolean (expected true/false, 1/0 or on/off)")


def _parse_auto_bool(what: str, raw: str) -> bool | None:
    """`auto` (None: the library decides), or a boolean as parse_bool reads it."""
    if raw.strip().lower() == "auto":
        return None
    try:
        return parse_bool(what, raw)
    except ConfigError:
        raise ConfigError(
            f"{what}: {raw!r} is not a boolean or auto (expected auto, yes/no, true/false, 1/0 or on/off)"
        ) from None


def _parse_int(what: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"{what}: {raw!r} is not a whole number") from None


def _parse_count(what: str, raw: str) -> int:
    value = _parse_int(what, raw)
    if value < 0:
        raise ConfigError(f"{what}: {value} is negative (expected 0 or more)")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(what: str, raw: str) -> str:
        if raw not in choices:
            raise ConfigError(f"{what}: {raw!r} is not one of {', '.join(choices)}")
        return raw

    return parse


def _parse_warmup(what: str, raw: str) -> tuple[int, ...]:
    # A boolean (as parse_bool reads one: configs written when warmup was only on/off keep working) or
    # batch sizes; "1" means batch size 1 either way.
    accepted = "expected true/false (1/0, on/off, yes/no), or batch sizes separated by commas, such as 1,8,64"
    text = raw.strip().lower()
    if text in _TRUE_WORDS:
        return (1,)
    if text in _FALSE_WORDS:
        return ()
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"{what}: {raw!r} is not valid; {accepted}") from None
    if any(size < 1 for size in sizes):
        raise ConfigError(f"{what}: {raw!r} has a batch size below 1; {accepted} (false turns warm-up off)")
    return tuple(dict.fromkeys(sizes))  # each size once, in the order given


def _native_enum(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    """The native backend's number for a choice (0, 1, ...: its position), or ORT's name for it."""

    def parse(what: str, raw: str) -> str:
        stripped = raw.strip()
        if stripped in choices:
            return stripped
        if stripped.isdigit() and int(stripped) < len(choices):
            return choices[int(stripped)]
        accepted = ", ".join(f"{i} ({name})" for i, name in enumerate(choices))
        raise ConfigError(f"{what}: {raw!r} is not one of {accepted}")

    return parse


def _parse_path(what: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigError(f"{what} is empty (expected a file name such as model.onnx)")
    return raw.strip()


def _parse_hooks_path(what: str, raw: str) -> str:
    path = raw.strip()
    if path and not path.endswith(".py"):
        raise ConfigError(f"{what}: {raw!r} is not a Python file (expected e.g. hooks.py, or empty)")
    return path


def _parse_text(what: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigError(f"{what} is empty (expected a value)")
    return raw.strip()


_SHRINKAGE = re.compile(r"^(cpu|gpu):\d+(;(cpu|gpu):\d+)*$")


def _parse_shrinkage(what: str, raw: str) -> str:
    if not _SHRINKAGE.match(raw.strip()):
        raise ConfigError(
            f"{what}: {raw!r} is not a list of devices (expected e.g. 'cpu:0', 'gpu:0' or 'cpu:0;gpu:0')"
        )
    return raw.strip()


def _copy_in_default_stream(what: str, raw: str) -> None:
    if not parse_bool(what, raw):
        raise ConfigError(
            f"{what}: {raw!r} cannot apply here: our copies and ORT's kernels are ordered on one "
            "stream, which needs ORT's copies on it too (expected 1, the native default, or leave it out)"
        )


# --- `parameters`: key -> (ModelOptions field, parser); `None` field: validated, nothing to store ----------


@dataclass(frozen=True)
class _Parameter:
    field: str | None
    parse: Callable[[str, str], Any]
    native: bool = True


_PARAMETERS: dict[str, _Parameter] = {
    # The native backend's parameters (same name, value format and meaning).
    "intra_op_thread_count": _Parameter("intra_op_num_threads", _parse_count),
    "inter_op_thread_count": _Parameter("inter_op_num_threads", _parse_count),
    "execution_mode": _Parameter("execution_mode", _native_enum(EXECUTION_MODES)),
    "cudnn_conv_algo_search": _Parameter("cudnn_conv_algo_search", _native_enum(CUDNN_CONV_ALGO_SEARCHES)),
    "arena_extend_strategy": _Parameter("arena_extend_strategy", _native_enum(ARENA_EXTEND_STRATEGIES)),
    "gpu_mem_limit": _Parameter("gpu_mem_limit", _parse_count),
    "do_copy_in_default_stream": _Parameter(None, _copy_in_default_stream),
    "enable_mem_arena": _Parameter("enable_mem_arena", parse_bool),
    "enable_mem_pattern": _Parameter("enable_mem_pattern", parse_bool),
    "memory.enable_memory_arena_shrinkage": _Parameter("arena_shrinkage", _parse_shrinkage),
    "session.use_device_allocator_for_initializers": _Parameter(
        "use_device_allocator_for_initializers", parse_bool
    ),
    "session.intra_op.allow_spinning": _Parameter("allow_spinning", parse_bool, native=False),
    # Ours: what the native backend has no word for.
    "onnx_file": _Parameter("onnx_file", _parse_path, native=False),
    "hooks": _Parameter("hooks", _parse_hooks_path, native=False),
    "allow_cpu_fallback": _Parameter("allow_cpu_fallback", parse_bool, native=False),
    "allow_cuda_fallback": _Parameter("allow_cuda_fallback", parse_bool, native=False),
    "gather_requests": _Parameter("gather_requests", _parse_auto_bool, native=False),
    "gather_after_preprocess": _Parameter("gather_after_preprocess", _parse_auto_bool, native=False),
    "pinned_staging": _Parameter("pinned_staging", parse_bool, native=False),
    "output_placement": _Parameter("output_placement", _one_of(OUTPUT_PLACEMENTS), native=False),
    "host_output_max_bytes": _Parameter("host_output_max_bytes", _parse_count, native=False),
    "cuda_graph": _Parameter("cuda_graph", parse_bool, native=False),
    "cuda_stack_bytes": _Parameter("cuda_stack_bytes", _parse_count, native=False),
    "warmup": _Parameter("warmup", _parse_warmup, native=False),
    "inflight_lanes": _Parameter("inflight_lanes", _parse_count, native=False),
    "custom_metrics": _Parameter("custom_metrics", _parse_auto_bool, native=False),
    # For clients, not the runtime: the values each integer input accepts (triton_ort.model.input_ranges).
    INPUT_RANGES: _Parameter(None, lambda what, raw: parse_ranges(raw, what), native=False),
}

# Our earlier spellings, kept so existing configs load; each logs a warning naming the native spelling.
DEPRECATED_PARAMETERS: dict[str, tuple[str, _Parameter]] = {
    "intra_op_num_threads": ("intra_op_thread_count", _PARAMETERS["intra_op_thread_count"]),
    "inter_op_num_threads": ("inter_op_thread_count", _PARAMETERS["inter_op_thread_count"]),
    "graph_optimization_level": (
        "optimization { graph { level: -1|0|1|2 } }",
        _Parameter("graph_optimization_level", _one_of(GRAPH_OPTIMIZATION_LEVELS)),
    ),
}


class _Collected:
    """Option values by ModelOptions field, remembering which spelling set each (to refuse two)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, name: str, value: Any, source: str) -> None:
        if name in self.values:
            raise ConfigError(
                f"{self.sources[name]} and {source} set the same option ({name}); give only one of them"
            )
        self.values[name], self.sources[name] = value, source


def _unknown_parameter(key: str) -> str:
    """The refusal of an unknown parameter: the one meant where a known one is close (case and typos),
    else every known one."""
    known = sorted({*_PARAMETERS, *DEPRECATED_PARAMETERS, *BACKEND_KEYS})
    by_lower = {name.lower(): name for name in (*_PARAMETERS, *BACKEND_KEYS)}  # current spellings
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    if close:
        return f"unknown parameter {key!r}; did you mean {by_lower[close[0]]!r}?"
    return f"unknown parameter {key!r}; known parameters: {', '.join(known)}"


def _collect_parameters(parameters: Mapping[str, str], collected: _Collected) -> None:
    for key, raw in parameters.items():
        if key in BACKEND_KEYS:
            continue
        if key in DEPRECATED_PARAMETERS:
            native, parameter = DEPRECATED_PARAMETERS[key]
            LOGGER.warning(
                "parameter %r is deprecated; use %s (the native onnxruntime backend's name)", key, native
            )
        elif key in _PARAMETERS:
            parameter = _PARAMETERS[key]
        else:
            raise ConfigError(_unknown_parameter(key))
        value = parameter.parse(f"parameter {key!r}", raw)
        if parameter.field is not None:
            collected.set(parameter.field, value, f"parameter {key}")


# --- `optimization` -------------------------------------------------------------------------------------

# The native TensorRT accelerator's parameters (its README's mapping table; src/onnxruntime.cc) -> the
# ORT TensorRT EP option and the value's kind. precision_mode is mapped on its own.
_TENSORRT_PARAMETERS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", "count"),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", "int"),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", "int"),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", "text"),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", "bool"),
    "trt_dla_enable": ("trt_dla_enable", "bool"),
    "trt_dla_core": ("trt_dla_core", "int"),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", "bool"),
    "trt_engine_cache_path": ("trt_engine_cache_path", "text"),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", "text"),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", "bool"),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", "bool"),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", "bool"),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", "bool"),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", "bool"),
    "trt_timing_cache_path": ("trt_timing_cache_path", "text"),
    "trt_force_timing_cache": ("trt_force_timing_cache", "bool"),
    "trt_detailed_build_log": ("trt_detailed_build_log", "bool"),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", "bool"),
    "trt_sparsity_enable": ("trt_sparsity_enable", "bool"),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", "int"),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", "int"),
    "trt_tactic_sources": ("trt_tactic_sources", "text"),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", "text"),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", "text"),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", "text"),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", "text"),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", "bool"),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", "text"),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", "int"),
}
# Native keys that cannot apply here, with the reason.
_TENSORRT_REFUSED = {
    "trt_cuda_graph_enable": (
        "a TensorRT CUDA graph replays on the addresses it was captured with, while this backend binds "
        "each request's own memory; CUDA graphs are supported with the CUDA EP only "
        "(optimization { cuda { graphs: true } })"
    ),
}

# ORT's CUDA EP options (onnxruntime/core/providers/cuda/cuda_execution_provider_info.cc) that the "cuda"
# accelerator may set, with their kind. Options the native backend's "cuda" accelerator passes to ORT as
# they are; bool values are normalised to 1/0, which every ORT release parses.
_CUDA_PARAMETERS: dict[str, str] = {
    "cudnn_conv_use_max_workspace": "bool",
    "cudnn_conv1d_pad_to_nc1d": "bool",
    "tunable_op_enable": "bool",
    "tunable_op_tuning_enable": "bool",
    "tunable_op_max_tuning_duration_ms": "int",
    "enable_skip_layer_norm_strict_mode": "bool",
    "prefer_nhwc": "bool",
    "use_ep_level_unified_stream": "bool",
    "use_tf32": "bool",
    "fuse_conv_bias": "bool",
    "sdpa_kernel": "int",
}
# CUDA EP options that are also ModelOptions fields: the accelerator may set them instead of `parameters`.
_CUDA_FIELDS: dict[str, _Parameter] = {
    "gpu_mem_limit": _PARAMETERS["gpu_mem_limit"],
    "arena_extend_strategy": _PARAMETERS["arena_extend_strategy"],
    "cudnn_conv_algo_search": _PARAMETERS["cudnn_conv_algo_search"],
}
_CUDA_REFUSED = {
    "device_id": "the device is the instance's (instance_group gpus)",
    "user_compute_stream": "this backend computes on the instance's own stream",
    "has_user_compute_stream": "this backend computes on the instance's own stream",
    "enable_cuda_graph": "use optimization { cuda { graphs: true } } (or parameter cuda_graph), which also "
    "keeps the fixed buffers a graph replay needs",
    "gpu_external_alloc": "it takes a function pointer, which a config cannot give",
    "gpu_external_free": "it takes a function pointer, which a config cannot give",
    "gpu_external_empty_cache": "it takes a function pointer, which a config cannot give",
}
# optimization fields that Triton core fills in for every model (JSON of the ModelConfig), with the value
# that means "not used"; only the python backend would read another value, and it does not.
_OPTIMIZATION_UNUSED: dict[str, tuple[Any, str]] = {
    "priority": ("PRIORITY_DEFAULT", "read by the TensorRT backend only"),
    "gather_kernel_buffer_threshold": (0, "the python backend gathers inputs without Triton's CUDA kernel"),
    "eager_batching": (False, "not read by the python backend"),
}
# Read by Triton core itself (its own copies to and from the backend): they apply as they are.
_OPTIMIZATION_CORE = frozenset({"input_pinned_memory", "output_pinned_memory"})
_CUDA_OPTIMIZATION_UNUSED: dict[str, Any] = {"busy_wait_events": False, "output_copy_stream": False}


def _typed(where: str, kind: str, raw: Any) -> str:
    """A native accelerator value as the string ORT takes, checked by kind."""
    text = str(raw)
    if kind == "bool":
        return "1" if parse_bool(where, text) else "0"
    if kind == "count":
        return str(_parse_count(where, text))
    if kind == "int":
        return str(_parse_int(where, text))
    return _parse_text(where, text)


def _parameters_of(accelerator: Mapping[str, Any], where: str) -> dict[str, Any]:
    parameters = accelerator.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"{where}: parameters must be key/value pairs, got {parameters!r}")
    return dict(parameters)


def _tensorrt_options(accelerator: Mapping[str, Any], where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, raw in _parameters_of(accelerator, where).items():
        name = f"{where} parameter {key!r}"
        if key == "precision_mode":
            if raw not in PRECISION_MODES:
                raise ConfigError(f"{name}: {raw!r} is not one of {', '.join(PRECISION_MODES)}")
            flag = PRECISION_MODES[raw]
            if flag:
                options[flag] = "1"
        elif key in _TENSORRT_PARAMETERS:
            option, kind = _TENSORRT_PARAMETERS[key]
            options[option] = _typed(name, kind, raw)
        elif key in _TENSORRT_REFUSED:
            raise ConfigError(f"{name} cannot apply here: {_TENSORRT_REFUSED[key]}")
        else:
            known = sorted(["precision_mode", *_TENSORRT_PARAMETERS])
            raise ConfigError(f"unknown {name}; known: {', '.join(known)}")
    return options


def _cuda_options(accelerator: Mapping[str, Any], where: str, collected: _Collected) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, raw in _parameters_of(accelerator, where).items():
        name = f"{where} parameter {key!r}"
        if key in _CUDA_PARAMETERS:
            options[key] = _typed(name, _CUDA_PARAMETERS[key], raw)
        elif key in _CUDA_FIELDS:
            parameter = _CUDA_FIELDS[key]
            assert parameter.field is not None
            collected.set(parameter.field, parameter.parse(name, str(raw)), name)
        elif key == "do_copy_in_default_stream":
            _copy_in_default_stream(name, str(raw))
        elif key in _CUDA_REFUSED:
            raise ConfigError(f"{name} cannot apply here: {_CUDA_REFUSED[key]}")
        else:
            known = sorted([*_CUDA_PARAMETERS, *_CUDA_FIELDS, "do_copy_in_default_stream"])
            raise ConfigError(f"unknown {name}; known: {', '.join(known)}")
    return options


def _accelerators(section: Mapping[str, Any], kind: str) -> list[tuple[str, Mapping[str, Any], str]]:
    entries = section.get(kind) or []
    if not isinstance(entries, list):
        raise ConfigError(f"optimization.execution_accelerators.{kind} must be a list, got {entries!r}")
    named = []
    for index, accelerator in enumerate(entries):
        name = accelerator.get("name", "") if isinstance(accelerator, Mapping) else ""
        named.append((str(name), accelerator, f"optimization.execution_accelerators.{kind}[{index}]"))
    return named


def _collect_accelerators(section: Mapping[str, Any], collected: _Collected) -> None:
    for name, accelerator, where in _accelerators(section, "gpu_execution_accelerator"):
        if name == "tensorrt":
            collected.set("tensorrt_options", _tensorrt_options(accelerator, where), where)
        elif name == "cuda":
            collected.set("cuda_options", _cuda_options(accelerator, where, collected), where)
        else:
            raise ConfigError(f"{where}: unknown execution accelerator {name!r} (expected tensorrt or cuda)")
    for name, accelerator, where in _accelerators(section, "cpu_execution_accelerator"):
        if name != "openvino":
            raise ConfigError(f"{where}: unknown execution accelerator {name!r} (expected openvino)")
        if _parameters_of(accelerator, where):
            raise ConfigError(
                f"{where}: the openvino accelerator takes no parameters (the native backend ignores them; "
                "it runs OpenVINO on CPU)"
            )
        collected.set("openvino", True, where)
    unknown = sorted(set(section) - {"gpu_execution_accelerator", "cpu_execution_accelerator"})
    if unknown:
        raise ConfigError(f"optimization.execution_accelerators: unknown field(s) {unknown}")


def _native_graph_level(raw: Any) -> str:
    try:
        level = int(raw)
    except (TypeError, ValueError):
        level = None
    if level not in NATIVE_GRAPH_LEVELS:
        accepted = ", ".join(f"{k} ({v})" for k, v in NATIVE_GRAPH_LEVELS.items())
        raise ConfigError(f"optimization.graph.level: {raw!r} is not one of {accepted}")
    return NATIVE_GRAPH_LEVELS[level]


def _collect_cuda(cuda: Mapping[str, Any], collected: _Collected) -> None:
    for key, value in cuda.items():
        if key == "graphs":
            collected.set("cuda_graph", bool(value), "optimization.cuda.graphs")
        elif key in _CUDA_OPTIMIZATION_UNUSED:
            if value != _CUDA_OPTIMIZATION_UNUSED[key]:
                raise ConfigError(
                    f"optimization.cuda.{key}: {value!r} cannot apply here (read by the TensorRT backend "
                    "only; leave it out)"
                )
        elif key == "graph_spec":
            if value:
                raise ConfigError(
                    "optimization.cuda.graph_spec cannot apply here: ORT captures one CUDA graph per input "
                    "shape as requests arrive (leave graph_spec out)"
                )
        else:
            raise ConfigError(f"optimization.cuda: unknown field {key!r} (expected graphs)")


def _collect_optimization(optimization: Mapping[str, Any], collected: _Collected) -> None:
    for key, value in optimization.items():
        if key == "graph":
            if "level" in (value or {}):
                collected.set(
                    "graph_optimization_level",
                    _native_graph_level(value["level"]),
                    "optimization.graph.level",
                )
        elif key == "cuda":
            _collect_cuda(value or {}, collected)
        elif key == "execution_accelerators":
            _collect_accelerators(value or {}, collected)
        elif key in _OPTIMIZATION_UNUSED:
            unused, reason = _OPTIMIZATION_UNUSED[key]
            if value != unused:
                raise ConfigError(f"optimization.{key}: {value!r} cannot apply here ({reason}); leave it out")
        elif key not in _OPTIMIZATION_CORE:
            raise ConfigError(f"optimization: unknown field {key!r}")


def _check_combinations(values: Mapping[str, Any]) -> None:
    shrinkage = str(values.get("arena_shrinkage", ""))
    if "cpu:" in shrinkage and values.get("enable_mem_arena") is False:
        raise ConfigError(
            f"memory.enable_memory_arena_shrinkage {shrinkage!r} names the CPU arena, but enable_mem_arena "
            "is 0: there is no CPU arena to shrink; drop the cpu entry or enable the arena"
        )
    if shrinkage and values.get("cuda_graph"):
        raise ConfigError(
            "memory.enable_memory_arena_shrinkage cannot apply with CUDA graphs (cuda_graph / "
            "optimization.cuda.graphs): a captured graph replays on fixed allocations; drop one of them"
        )
    if values.get("tensorrt_options") is not None and values.get("cuda_graph"):
        raise ConfigError(
            "CUDA graphs (cuda_graph / optimization.cuda.graphs) cannot be combined with the tensorrt "
            "accelerator here: ORT's graph capture is the CUDA EP's; drop one of them"
        )


def parse_options(
    parameters: Mapping[str, str], optimization: Mapping[str, Any] | None = None
) -> ModelOptions:
    """Build options from string parameters and the model config's `optimization` (Triton's JSON);
    unknown keys, bad values and options that cannot apply here raise ConfigError."""
    collected = _Collected()
    _collect_parameters(parameters, collected)
    _collect_optimization(optimization or {}, collected)
    _check_combinations(collected.values)
    return ModelOptions(**collected.values)


def parameters_from_model_config(model_config: Mapping[str, Any]) -> dict[str, str]:
    """config.pbtxt's `parameters { key: .. value { string_value: .. } }`, as Triton hands it over in JSON."""
    raw = model_config.get("parameters") or {}
    return {key: str(value.get("string_value", "")) for key, value in raw.items()}


_FIELDS = {f.name for f in fields(ModelOptions)}
assert {p.field for p in _PARAMETERS.values() if p.field} <= _FIELDS
