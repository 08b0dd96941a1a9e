"""The memory settings a GPU instance ships with (docs/benchmarks.md, "Choosing the instance count"): the CUDA
context's stack limit and the CUDA arena's growth; the GPU side is tests/gpu/test_instance_memory_gpu.py."""

from __future__ import annotations

import pytest

from triton_ort import ConfigError, ModelOptions, parse_options
from triton_ort.runtime.cuda_context import lower_stack_limit, stack_limit
from triton_ort.runtime.session import Placement, cuda_provider_options


def test_the_stack_limit_is_64_bytes_unless_the_config_says() -> None:
    assert ModelOptions().cuda_stack_bytes == 64
    assert parse_options({"cuda_stack_bytes": "0"}).cuda_stack_bytes == 0  # CUDA's own limit
    with pytest.raises(ConfigError, match=r"cuda_stack_bytes.*negative"):
        parse_options({"cuda_stack_bytes": "-1"})


def test_the_cuda_arena_grows_by_what_a_run_asks() -> None:
    options = cuda_provider_options(ModelOptions(), Placement("cuda", 0, None))
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    native = parse_options({"arena_extend_strategy": "0"})
    native_options = cuda_provider_options(native, Placement("cuda", 0, None))
    assert native_options["arena_extend_strategy"] == "kNextPowerOfTwo"


def test_without_a_cuda_context_the_limit_is_left_alone() -> None:
    # This process has no current CUDA context (a CPU machine, or a GPU one before any CUDA call).
    if stack_limit() is not None:
        pytest.skip("a CUDA context is current in this process")
    assert lower_stack_limit(256) is None
