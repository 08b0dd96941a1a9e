"""docs/troubleshooting.md cannot rot: every log line its CPU-host table lists is one the real server
prints on this CPU machine, and the ONNX Runtime error it explains is the one ORT raises."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from tests.support.paths import ROOT, demo_onnx
from triton_ort.harness.server import LocalTritonServer, gpu_present
from triton_ort.runtime.providers import diagnose_missing_cuda_provider

pytestmark = pytest.mark.integration

TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"


def cpu_host_lines() -> list[str]:
    """The first column's quoted text of each row of the CPU-host table."""
    text = TROUBLESHOOTING.read_text()
    section = text.split("## Lines every start prints on a machine without an NVIDIA GPU")[1].split("\n## ")[
        0
    ]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]


def test_the_table_lists_the_lines_users_ask_about() -> None:
    listed = " ".join(cpu_host_lines())
    for line in (
        "CudaDriverHelper has not been initialized",
        "Failed to initialize NVML",
        "DCGM unable to start",
    ):
        assert line in listed


@pytest.mark.skipif(gpu_present(), reason="these are the lines of a host without an NVIDIA GPU")
def test_each_cpu_host_line_is_printed_by_a_server_that_still_serves(server: LocalTritonServer) -> None:
    log = server.log()
    missing = [line for line in cpu_host_lines() if line not in log]
    assert missing == [], f"the server no longer prints {missing}; update docs/troubleshooting.md"
    assert httpclient.InferenceServerClient(server.http_url).is_model_ready("demo")  # harmless indeed


def test_the_ort_error_explained_is_the_one_ort_raises() -> None:
    """Device memory bound to a session without the CUDA EP: CPU ORT refuses it at bind time, before
    touching the pointer (a host buffer stands in for device memory)."""
    quoted = re.search(r'## "(.+) \.\.\.\]"', TROUBLESHOOTING.read_text())
    assert quoted is not None
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    stand_in = np.zeros((1, 2010), np.float32)
    binding = session.io_binding()
    with pytest.raises(RuntimeError) as raised:
        binding.bind_input("np_script_embeddings", "cuda", 0, np.float32, [1, 2010], stand_in.ctypes.data)
    assert quoted.group(1) in str(raised.value)
    assert quoted.group(1) in diagnose_missing_cuda_provider()  # our load error names it too
