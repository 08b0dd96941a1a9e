"""Several GPUs: each instance keeps to its own device. Run on a host with at least two GPUs (skipped
elsewhere): `bash scripts/gpu_multi_check.sh` runs these tests and the 1-vs-2-GPU benchmark.

What is checked:
- a ModelInstance on GPU 1 creates no CUDA context on any other GPU (the driver's own per-device
  primary-context state, read in a fresh process), and answers right;
- through tritonserver with one instance per GPU (`gpus: [0, 1]`), nvidia-smi lists the stub serving
  GPU 1 on GPU 1 only: 0 MiB on GPU 0 (numpy requests: nothing in the python backend's path needs GPU 0);
- a CUDA-shm input registered on GPU 1 reaches the instance on GPU 1 with no copy, and one registered on
  GPU 0 costs exactly one device-to-device copy (the runner's count and CUPTI's agree).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from tests.support.paths import ROOT, TF32_TOLERANCE, demo_onnx
from triton_ort.harness.repository import read_config, write_config
from triton_ort.harness.server import LocalTritonServer
from triton_ort.runtime.copy_counter import cupti_counts_from_log, device_copy_counts_from_log
from triton_ort.runtime.stats import ExecuteStats

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least two CUDA GPUs"),
]
T = TypeVar("T")
TF32 = TF32_TOLERANCE  # ORT's CUDA EP computes fp32 GEMMs in TF32 by default
POOL_BYTES = 256 << 20
STUB = "triton_python_backend_stub"


def gpu_repository(tmp_path: Path, name: str, gpus: list[int], **parameters: str) -> Path:
    """A repository with a copy of the demo named `name`: one instance on each GPU in `gpus`."""
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "model_repository" / "demo", repository / name)
    shutil.copy(demo_onnx(), repository / name / "1" / "model.onnx")
    config = read_config(repository / name)
    config.name = name
    del config.instance_group[:]
    group = config.instance_group.add()
    group.kind = group.KIND_GPU
    group.count = 1
    group.gpus.extend(gpus)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    write_config(repository / name, config)
    return repository


@contextlib.contextmanager
def running(repository: Path, env: dict[str, str] | None = None) -> Iterator[LocalTritonServer]:
    # The launcher sizes GPU 0's CUDA pool; GPU 1's carries the tensors of the instance there.
    gpus = range(1, torch.cuda.device_count())
    pools = [f"--cuda-memory-pool-byte-size={gpu}:{POOL_BYTES}" for gpu in gpus]
    with LocalTritonServer(repository, log_verbose=1, extra_args=pools, env=env or {}) as server:
        yield server


def wait_for(read: Callable[[], list[T]], count: int, timeout_s: float = 20.0) -> list[T]:
    """The log is written by another process: wait until `count` records are there."""
    deadline = time.monotonic() + timeout_s
    while len(found := read()) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.mark.parametrize("device", [0, 1])
def test_an_instance_creates_a_cuda_context_on_its_own_gpu_only(tmp_path: Path, device: int) -> None:
    """Device 0 is the control: it shows that the probe sees a context where one was made."""
    probe = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.gpu.device_probe",
            "--device",
            str(device),
            "--onnx",
            str(demo_onnx()),
            "--config",
            str(ROOT / "model_repository" / "demo" / "config.pbtxt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_MODULE_LOADING": "LAZY"},
    )
    assert probe.returncode == 0, probe.stderr[-4000:]
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    count = torch.cuda.device_count()
    assert report["contexts_before"] == [False] * count, report
    assert report["contexts_after"] == [gpu == device for gpu in range(count)], report
    assert report["max_abs_error"] <= TF32["atol"] * 10, report
    assert (report["host_to_device_copies"], report["device_to_device_copies"]) == (1, 0), report


def nvidia_smi(query: str, fields: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def stub_memory_by_gpu(server_pid: int) -> dict[int, dict[int, int]]:
    """For each python-backend stub of this server (a child process): MiB it holds on each GPU index."""
    index_of = {uuid: int(index) for index, uuid in nvidia_smi("gpu", "index,uuid")}
    stubs: dict[int, dict[int, int]] = {}
    for pid, used_mib, uuid in nvidia_smi("compute-apps", "pid,used_memory,gpu_uuid"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ValueError):
            continue
        if STUB.encode() in cmdline and parent == server_pid:
            stubs.setdefault(int(pid), {})[index_of[uuid]] = int(used_mib)
    return stubs


def test_one_instance_per_gpu_holds_memory_on_its_own_gpu_only(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    from triton_ort.harness.reference import reference_outputs
    from triton_ort.harness.transport import infer

    repository = gpu_repository(tmp_path, "demo_per_gpu", gpus=[0, 1])
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1 + i % 9, 2010)).astype(np.float32) for i in range(64)]
    wants = [reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"] for x in xs]
    with running(repository) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)

        def ask(i: int) -> NDArray[Any]:
            return infer(client, "demo_per_gpu", {"np_script_embeddings": xs[i]}, ["np_logits"])[0][
                "np_logits"
            ]

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(len(xs))))
        assert server.process is not None
        memory = stub_memory_by_gpu(server.process.pid)
        log = server.log()
    for i, (got, want) in enumerate(zip(answers, wants, strict=True)):
        np.testing.assert_allclose(got, want, **TF32, err_msg=f"request {i}")
    table = json.dumps(memory)
    assert len(memory) == 2, (
        f"expected the two stubs of this server in nvidia-smi's process list (a PID namespace hides them?): "
        f"{table}\n{log[-3000:]}"
    )
    # Each stub on exactly one GPU, one stub per GPU: the stub serving GPU 1 holds 0 MiB on GPU 0.
    assert sorted(sorted(held) for held in memory.values()) == [[0], [1]], (
        f"MiB held per stub pid and GPU index: {table}"
    )


def test_cuda_shm_input_on_the_instances_gpu_is_not_copied_and_on_another_costs_one_copy(
    tmp_path: Path,
) -> None:
    import tritonclient.grpc as grpcclient

    from triton_ort.cli.cuda_shm import CudaShmIO
    from triton_ort.harness.reference import reference_outputs

    repository = gpu_repository(tmp_path, "demo_gpu1", gpus=[1], output_placement="device")
    x = np.random.default_rng(3).standard_normal((64, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    layout = {"np_logits": (np.dtype(np.float32), (64, 2))}
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG", "TRITON_ORT_COUNT_COPIES": "1"}
    answers = {}
    with running(repository, debug) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        loaded = len(server.log())  # the warm-up at load logs records too
        for gpu in (1, 0):
            with CudaShmIO(client, "demo_gpu1", {"np_script_embeddings": x}, layout, device_id=gpu) as shm:
                shm.infer()
                answers[gpu] = shm.read_outputs()["np_logits"]
        executes = wait_for(lambda: ExecuteStats.from_log(server.log()[loaded:]), 2)
        host_copies = wait_for(lambda: cupti_counts_from_log(server.log()[loaded:]), 2)
        device_copies = wait_for(lambda: device_copy_counts_from_log(server.log()[loaded:]), 2)
    for input_gpu, got in answers.items():
        np.testing.assert_allclose(got, want, **TF32, err_msg=f"input on GPU {input_gpu}")
    same, other = executes[:2]
    assert same.input_devices == ["cuda:1"] and same.device_to_device_copies == 0, same
    assert other.input_devices == ["cuda:0"] and other.device_to_device_copies == 1, other
    assert all(e.host_to_device_copies == 0 and e.device_to_host_copies == 0 for e in (same, other))
    # CUPTI, in the stub, during each execute: no host copy at all; device copies 0, then exactly 1.
    assert host_copies[:2] == [{"HtoD": 0, "DtoH": 0}] * 2, host_copies
    assert [sum(counts.values()) for counts in device_copies[:2]] == [0, 1], device_copies
