"""What a GPU instance holds on the device: its CUDA context's per-thread stack limit is lowered at load
(parameter cuda_stack_bytes, src/triton_ort/runtime/cuda_context.py), which frees that much local memory per
instance, and the instance still answers. Each instance is measured in a fresh process, as a stub is one
(diagnostics.bench_memory: nvidia-smi's per-process figure)."""

from __future__ import annotations

import pytest
import torch

from diagnostics.bench_memory import measure
from tests.support.paths import MODEL_REPOSITORY
from triton_ort.model.options import DEFAULT_CUDA_STACK_BYTES

pytestmark = pytest.mark.gpu

CUDA_DEFAULT_STACK_BYTES = 1024


def test_the_lowered_stack_limit_frees_its_local_memory_per_instance() -> None:
    shipped = measure("instance", "demo", MODEL_REPOSITORY)  # its gathered execute raised no error
    cuda_default = measure("instance_cuda_stack", "demo", MODEL_REPOSITORY)
    assert "error" not in shipped and "error" not in cuda_default, (shipped, cuda_default)
    assert shipped["stack_bytes_after"] == DEFAULT_CUDA_STACK_BYTES  # no demo kernel needed more
    assert cuda_default["stack_bytes_after"] == CUDA_DEFAULT_STACK_BYTES
    # The context reserves the stack for every thread the GPU can hold resident (198 MiB on an H200).
    properties = torch.cuda.get_device_properties(0)
    resident_threads = properties.multi_processor_count * properties.max_threads_per_multi_processor
    freed_mib = resident_threads * (CUDA_DEFAULT_STACK_BYTES - DEFAULT_CUDA_STACK_BYTES) / 2**20
    saved_mib = cuda_default["gpu_mib"] - shipped["gpu_mib"]
    assert saved_mib >= 0.8 * freed_mib, (saved_mib, freed_mib, shipped, cuda_default)
