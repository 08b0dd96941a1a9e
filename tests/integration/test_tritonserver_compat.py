"""`triton-ort-tritonserver`, started as Model Analyzer's local mode starts a tritonserver binary (options
and values as separate words, explicit model control, its own ports), loads and serves a model it is asked
to load, and stops on SIGTERM as tritonserver does (docs/serving-your-model.md, "Model Analyzer")."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.launcher import READY, launch
from tests.support.repository import build_demo_repository
from triton_ort.harness.server import free_ports

pytestmark = pytest.mark.integration


def test_model_analyzers_command_line_serves_the_model_it_loads(tmp_path: Path) -> None:
    entry = Path(sys.executable).parent / "triton-ort-tritonserver"
    assert entry.exists() or shutil.which("triton-ort-tritonserver"), "the console script is installed"
    repository = build_demo_repository(tmp_path / "repository")
    http, grpc, metrics = free_ports(3)
    command = [str(entry), "--model-repository", str(repository), "--http-port", str(http), "--grpc-port",
               str(grpc), "--metrics-port", str(metrics), "--model-control-mode", "explicit"]  # fmt: skip
    launched = launch(command, tmp_path / "tmp")
    try:
        launched.wait_for_line(READY, 180)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        assert not client.is_model_ready(
            "demo"
        )  # explicit: nothing loads until asked, as Model Analyzer asks
        client.load_model("demo")
        x = np.ones((2, 2010), dtype=np.float32)
        item = httpclient.InferInput("np_script_embeddings", list(x.shape), "FP32")
        item.set_data_from_numpy(x)
        assert client.infer("demo", [item]).as_numpy("np_logits").shape == (2, 2)
        launched.process.send_signal(signal.SIGTERM)  # Model Analyzer's stop: Popen.terminate()
        assert launched.process.wait(timeout=60) == 0, launched.output()
    finally:
        if launched.process.poll() is None:  # its session: tritonserver and its stubs too
            os.killpg(launched.process.pid, signal.SIGKILL)
            launched.process.wait()
