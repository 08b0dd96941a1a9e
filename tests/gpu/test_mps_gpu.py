"""A server under CUDA MPS (`LocalTritonServer(mps=True)`, `triton-ort serve --mps`) on a GPU host: the
server and every stub are clients of the daemon it started; a client outside MPS still reaches the model
zero-copy through CUDA shared memory (CUDA IPC between an MPS client and a process that is not one); and
at stop the daemon, its MPS server and its folder are gone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import MODEL_REPOSITORY, TF32_TOLERANCE, demo_onnx

pytestmark = pytest.mark.gpu
TF32 = TF32_TOLERANCE  # ORT's CUDA EP computes fp32 GEMMs in TF32 by default


def test_the_server_and_its_stubs_are_clients_of_their_own_mps_daemon(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    from triton_ort.cli.cuda_shm import CudaShmIO
    from triton_ort.harness.mps import PIPE_ENV, daemon_processes
    from triton_ort.harness.processes import stub_processes
    from triton_ort.harness.reference import reference_outputs
    from triton_ort.harness.server import LocalTritonServer

    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("this GPU host has no nvidia-cuda-mps-control")
    x = np.random.default_rng(0).standard_normal((16, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    repository = tmp_path / "repository"
    shutil.copytree(MODEL_REPOSITORY / "demo", repository / "demo")
    layout = {"np_logits": (np.dtype(np.float32), (16, 2))}
    with LocalTritonServer(repository, mps=True) as server:
        daemon = server.mps_daemon
        assert daemon is not None and server.process is not None
        assert PIPE_ENV not in os.environ  # this client is not an MPS client
        client = grpcclient.InferenceServerClient(server.grpc_url)
        with CudaShmIO(client, "demo", {"np_script_embeddings": x}, layout) as shm:
            for _ in range(3):
                shm.infer()
                np.testing.assert_allclose(shm.read_outputs()["np_logits"], want, **TF32)
        stubs = set(stub_processes(server.process.pid))
        clients = daemon.client_pids()
        folder = daemon.folder
        assert len(stubs) == 2, stubs  # the demo's two instances
        assert stubs | {server.process.pid} <= clients, (stubs, server.process.pid, clients)
    assert daemon_processes(folder) == []
    assert not folder.exists()
