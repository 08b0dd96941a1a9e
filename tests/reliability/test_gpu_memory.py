"""GPU memory under load, under an allocation the GPU cannot make, and across model reloads (marker `gpu`:
run on the GPU test host, skipped elsewhere).

The stub's GPU memory is read from nvidia-smi per process (torch's caching allocator, ORT's CUDA arena and
the CUDA context together); torch's own counters come from a test-only model.py that wraps the shipped one
and appends torch.cuda.memory_allocated/reserved to a file after every execute.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.reliability.support import DEMO_INPUT, DEMO_OUTPUT, assert_demo_answer, measured
from tests.support import graphs
from tests.support.paths import DEMO_MODEL_PY, ROOT
from tests.support.repository import BLOWUP, build_demo_repository
from triton_ort.harness.processes import gpu_memory_by_pid, stub_processes
from triton_ort.harness.repository import add_model
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import tritonclient_infer
from triton_ort.harness.waiting import wait_for

pytestmark = [pytest.mark.gpu, pytest.mark.integration]

MiB = 1024 * 1024
GROWTH_LIMIT = 64 * MiB

MEMSTATS_MODEL_PY = '''\
"""Test-only: the shipped model.py, plus torch's allocator counters appended to $TRITON_ORT_MEMSTATS after
every execute (one JSON line: pid, executes, allocated, reserved)."""

import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("shipped_model", Path(__file__).with_name("shipped_model.py"))
_shipped = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shipped)


class TritonPythonModel(_shipped.TritonPythonModel):
    def execute(self, requests):
        responses = super().execute(requests)
        self._executes = getattr(self, "_executes", 0) + 1
        line = {
            "pid": os.getpid(),
            "executes": self._executes,
            "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
        }
        with open(os.environ["TRITON_ORT_MEMSTATS"], "a") as stats:
            stats.write(json.dumps(line) + "\\n")
        return responses
'''


def _with_memstats(repository: Path, model: str) -> None:
    version = repository / model / "1"
    (version / "model.py").rename(version / "shipped_model.py")
    (version / "model.py").write_text(textwrap.dedent(MEMSTATS_MODEL_PY))


def _stub_gpu_bytes(server_pid: int, model: str) -> int:
    used = gpu_memory_by_pid() or {}
    return sum(used.get(pid, 0) for pid, path in stub_processes(server_pid).items() if f"/{model}/" in path)


def _server_gpu_bytes(server_pid: int) -> int:
    """GPU memory held by this tritonserver and its stubs: other processes on the GPU (tests run beside
    this one, other users of the host) are not ours to judge."""
    used = gpu_memory_by_pid() or {}
    return sum(used.get(pid, 0) for pid in (server_pid, *stub_processes(server_pid)))


def test_soak_keeps_torch_ort_and_process_gpu_memory_flat(tmp_path: Path) -> None:
    repository = build_demo_repository(tmp_path / "repository")
    _with_memstats(repository, "demo")
    stats_file = tmp_path / "memstats.jsonl"
    summary_file = tmp_path / "soak.json"
    with LocalTritonServer(repository, env={"TRITON_ORT_MEMSTATS": str(stats_file)}) as server:
        assert server.process is not None
        command = [
            sys.executable, "-m", "client.soak",
            "--http-url", server.http_url, "--grpc-url", server.grpc_url,
            "--server-pid", str(server.process.pid), "--model-repository", str(repository),
            "--requests", "60000", "--duration", "240", "--concurrency", "64", "--warmup", "6000",
            "--max-rows", "64", "--json", str(summary_file),
        ]  # fmt: skip
        finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=400)
    summary = json.loads(summary_file.read_text())
    lines = [json.loads(line) for line in stats_file.read_text().splitlines()]
    warm = next(line for line in lines if line["executes"] >= len(lines) // 10)
    last = lines[-1]
    growth, ranges = summary["memory_growth_mib"], summary["memory_range_mib"]
    measured(
        f"GPU soak: {summary['sent']} requests, wrong {summary['wrong']}, lost {summary['lost']}; floor "
        f"growth (MiB): stubs' RSS {growth['stubs']} in {ranges['stubs']}, tritonserver's RSS "
        f"{growth['tritonserver']} in {ranges['tritonserver']}, GPU {growth['gpu']} in {ranges['gpu']} "
        f"(limits {summary['memory_limits_mib']}); "
        f"torch allocated {warm['allocated'] / MiB:.1f} -> {last['allocated'] / MiB:.1f} MiB, reserved "
        f"{warm['reserved'] / MiB:.1f} -> {last['reserved'] / MiB:.1f} MiB over {last['executes']} executes"
    )
    # the soak's own verdicts: no wrong or lost answer, and each memory floor within its limit
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert summary["passed"] and summary["failures"] == [], summary["failures"]
    assert summary["gpu_readings"] >= 2 and growth["gpu"] is not None, "nvidia-smi gave no GPU readings"
    assert growth["stubs"] is not None and growth["tritonserver"] is not None
    assert last["allocated"] <= warm["allocated"] + MiB  # nothing kept between executes
    assert last["reserved"] <= warm["reserved"] + GROWTH_LIMIT


def test_allocation_larger_than_the_gpu_fails_alone_and_frees_what_it_took(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    add_model(repository, replace(BLOWUP, name="blowup_gpu", kind="KIND_GPU"), DEMO_MODEL_PY, graphs.blowup)
    with LocalTritonServer(repository) as server:
        assert server.process is not None
        pid = server.process.pid
        small = [("x", np.full((2, 1), 3.0, np.float32)), ("size", np.full((2, 1), 1024, np.int64))]
        assert tritonclient_infer("grpc", server.grpc_url, "blowup_gpu", small, ["out"]).ok
        before = _stub_gpu_bytes(pid, "blowup_gpu")
        # 2**40 floats per row (4 TiB): more than the GPU has; 2**20 (4 MiB) fits.
        sizes = [2**20, 2**40, 2**20, 2**20]
        xs = [np.full((2, 1), float(i), np.float32) for i in range(len(sizes))]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(sizes)) as pool:
            answers = list(
                pool.map(
                    lambda i: tritonclient_infer(
                        "grpc",
                        server.grpc_url,
                        "blowup_gpu",
                        [("x", xs[i]), ("size", np.full((2, 1), sizes[i], np.int64))],
                        ["out"],
                    ),
                    range(len(sizes)),
                )
            )
        after = _stub_gpu_bytes(pid, "blowup_gpu")
        ready = httpclient.InferenceServerClient(server.http_url).is_server_ready()
    measured(
        f"GPU allocation refused: stub GPU memory {before / MiB:.0f} -> {after / MiB:.0f} MiB; "
        f"{answers[1].message[:160]}"
    )
    # Its own size cannot fit any GPU: the client's error, not a retryable shortage (triton_ort.errors).
    assert answers[1].status == "StatusCode.INVALID_ARGUMENT", answers[1]
    assert "this request needs a buffer of" in answers[1].message, answers[1]
    for i in (0, 2, 3):
        assert answers[i].ok, answers[i]
        np.testing.assert_array_equal(answers[i].outputs["out"], xs[i])
    assert after <= before + GROWTH_LIMIT
    assert ready


def test_reload_under_explicit_model_control_gives_the_gpu_memory_back(tmp_path: Path) -> None:
    repository = build_demo_repository(tmp_path / "repository")
    x = np.random.default_rng(9).standard_normal((64, 2010)).astype(np.float32)
    explicit = ["--model-control-mode=explicit", "--load-model=demo"]
    with LocalTritonServer(repository, extra_args=explicit) as server:
        assert server.process is not None
        pid = server.process.pid
        client = httpclient.InferenceServerClient(server.http_url)
        assert_demo_answer(
            tritonclient_infer("http", server.http_url, "demo", [(DEMO_INPUT, x)], [DEMO_OUTPUT]), x
        )
        client.unload_model("demo")
        wait_for(lambda: not stub_processes(pid), 60)
        time.sleep(1)
        unloaded = [_server_gpu_bytes(pid)]
        loaded = []
        for _ in range(3):
            client.load_model("demo")
            assert_demo_answer(
                tritonclient_infer("grpc", server.grpc_url, "demo", [(DEMO_INPUT, x)], [DEMO_OUTPUT]), x
            )
            loaded.append(_stub_gpu_bytes(pid, "demo"))
            client.unload_model("demo")
            wait_for(lambda: not stub_processes(pid), 60)
            time.sleep(1)
            unloaded.append(_server_gpu_bytes(pid))
    measured(
        f"GPU reloads: this server's GPU memory after each unload {[u // MiB for u in unloaded]} MiB; "
        f"stub GPU memory while loaded {[b // MiB for b in loaded]} MiB"
    )
    # per-process readings that are all 0 would prove nothing: the server and a loaded stub hold contexts
    assert min(unloaded) > 0 and min(loaded) > 0, (
        "nvidia-smi reported no GPU memory for this server's processes"
    )
    assert max(unloaded) - unloaded[0] <= GROWTH_LIMIT, "GPU memory not given back after unload"
    assert max(loaded) - min(loaded) <= GROWTH_LIMIT
