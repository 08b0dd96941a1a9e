"""Model options, read from config.pbtxt `parameters`.

Every key has a validated default; an unknown key or a bad value fails the load with a message that names
the key, the value and what is accepted, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigError

# Keys the python backend itself reads from the same `parameters` block; they are not ours to reject.
BACKEND_KEYS = frozenset({"FORCE_CPU_ONLY_INPUT_TENSORS", "EXECUTION_ENV_PATH"})

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
ARENA_EXTEND_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")
CUDNN_CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
OUTPUT_PLACEMENTS = ("auto", "device", "host")
# Up to this many output bytes per ORT run, handing outputs back from pinned host memory is faster than
# from the device through the python backend. Measured on an H200 with Triton 2.51 (docs/benchmarks.md,
# `client.bench --crossover`): host faster at 64 KiB, device faster from 256 KiB on.
DEFAULT_HOST_OUTPUT_MAX_BYTES = 131072


@dataclass(frozen=True)
class ModelOptions:
    onnx_file: str = "model.onnx"
    """Path of the ONNX file, relative to the model's version directory."""
    allow_cpu_fallback: bool = False
    """On a GPU instance whose CUDA EP cannot load: run on CPU with a warning instead of failing the load."""
    gather_requests: bool = True
    """Concatenate the requests of one execute() into one ORT run when their shapes allow it."""
    pinned_staging: bool = True
    """CPU inputs for a GPU instance go through pinned host memory (faster, asynchronous DMA)."""
    output_placement: str = "auto"
    """GPU instances: where outputs are handed to Triton. 'device' keeps them on the GPU (no copy),
    'host' copies them once into pinned host memory, 'auto' picks 'host' for runs whose output bytes are at
    most host_output_max_bytes (a GPU hand-back costs a fixed ~0.45 ms that small outputs do not repay)."""
    host_output_max_bytes: int = DEFAULT_HOST_OUTPUT_MAX_BYTES
    """The 'auto' crossover, in bytes of output per ORT run."""
    cuda_graph: bool = False
    """GPU instances: capture the model as ORT CUDA graphs (one per input shape, at most 32) and replay
    them, which saves kernel-launch time; inputs and outputs are copied through fixed buffers."""
    warmup: tuple[int, ...] = (1,)
    """Batch sizes run once each at load, before the model reports ready (zeros; other variable axes 1),
    so the first requests do not pay for cuBLAS/cuDNN initialisation (about 100 ms on a GPU) or for ORT's
    first allocation at each size. Written `true` (= 1), `false` (none), or a list such as `1,8,64`."""
    gpu_mem_limit: int = 0
    """Bytes the CUDA EP's arena may hold; 0 = no limit."""
    arena_extend_strategy: str = "kNextPowerOfTwo"
    cudnn_conv_algo_search: str = "EXHAUSTIVE"
    graph_optimization_level: str = "all"
    intra_op_num_threads: int = 0
    """0 lets ORT choose (one per physical core)."""
    inter_op_num_threads: int = 0


def _parse_bool(key: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"parameter {key!r}: {raw!r} is not a boolean (expected true/false)")


def _parse_count(key: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"parameter {key!r}: {raw!r} is not a whole number") from None
    if value < 0:
        raise ConfigError(f"parameter {key!r}: {value} is negative (expected 0 or more)")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        if raw not in choices:
            raise ConfigError(f"parameter {key!r}: {raw!r} is not one of {', '.join(choices)}")
        return raw

    return parse


def _parse_warmup(key: str, raw: str) -> tuple[int, ...]:
    # Not _parse_bool: "1" is a batch size here, and "yes"/"on" would read as a list of one size.
    accepted = "expected true, false, or batch sizes separated by commas, such as 1,8,64"
    text = raw.strip().lower()
    if text in ("true", "false"):
        return (1,) if text == "true" else ()
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"parameter {key!r}: {raw!r} is not valid; {accepted}") from None
    if any(size < 1 for size in sizes):
        raise ConfigError(
            f"parameter {key!r}: {raw!r} has a batch size below 1; {accepted} (false turns warm-up off)"
        )
    return tuple(dict.fromkeys(sizes))  # each size once, in the order given


def _parse_path(key: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigError(f"parameter {key!r} is empty (expected a file name such as model.onnx)")
    return raw.strip()


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "onnx_file": _parse_path,
    "allow_cpu_fallback": _parse_bool,
    "gather_requests": _parse_bool,
    "pinned_staging": _parse_bool,
    "output_placement": _one_of(OUTPUT_PLACEMENTS),
    "host_output_max_bytes": _parse_count,
    "cuda_graph": _parse_bool,
    "warmup": _parse_warmup,
    "gpu_mem_limit": _parse_count,
    "arena_extend_strategy": _one_of(ARENA_EXTEND_STRATEGIES),
    "cudnn_conv_algo_search": _one_of(CUDNN_CONV_ALGO_SEARCHES),
    "graph_optimization_level": _one_of(GRAPH_OPTIMIZATION_LEVELS),
    "intra_op_num_threads": _parse_count,
    "inter_op_num_threads": _parse_count,
}
assert set(_PARSERS) == {f.name for f in fields(ModelOptions)}


def parse_options(parameters: Mapping[str, str]) -> ModelOptions:
    """Build options from string parameters; unknown keys and bad values raise ConfigError."""
    values: dict[str, Any] = {}
    for key, raw in parameters.items():
        if key in BACKEND_KEYS:
            continue
        if key not in _PARSERS:
            raise ConfigError(f"unknown parameter {key!r}; known parameters: {', '.join(sorted(_PARSERS))}")
        values[key] = _PARSERS[key](key, raw)
    return ModelOptions(**values)


def parameters_from_model_config(model_config: Mapping[str, Any]) -> dict[str, str]:
    """config.pbtxt's `parameters { key: .. value { string_value: .. } }`, as Triton hands it over in JSON."""
    raw = model_config.get("parameters") or {}
    return {key: str(value.get("string_value", "")) for key, value in raw.items()}
