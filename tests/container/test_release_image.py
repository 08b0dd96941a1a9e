"""The server image built for another Triton release (`make docker-server-image TRITON_RELEASE=24.10`; compose
builds it with TRITON_RELEASE=24.10): here on the stand-in of that release (tritonserver 2.51.0 from
nvidia-pytriton 0.7.0), served by compose as a user serves it, with a host repository whose model keeps
requests in flight (docs/inflight.md), which 2.51's python backend allows: every concurrent answer is ONNX
Runtime's, and the log says the requests were kept in flight."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from numpy.typing import NDArray

from tests.container.conftest import HTTP_URL, Compose, docker
from tests.support.repository import keep_in_flight

RELEASE = "24.10"
IMAGE = f"triton-ort/server:{RELEASE}"
LANES = 2

pytestmark = pytest.mark.skipif(
    docker("image", "inspect", IMAGE, check=False).returncode != 0,
    reason=f"{IMAGE} not built: `make docker-server-image TRITON_RELEASE={RELEASE}`",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Compose, Path]]:
    """The image's own demo, copied out, served from the host with two lanes in flight."""
    root = tmp_path_factory.mktemp("release") / "repository"
    root.mkdir()
    created = docker("create", IMAGE).stdout.strip()
    try:
        docker("cp", f"{created}:/models/demo", str(root / "demo"))
    finally:
        docker("rm", created)
    keep_in_flight(root / "demo", LANES)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    compose = Compose(
        ["docker/compose.models.yaml"],
        env={"TRITON_RELEASE": RELEASE, "TRITON_ORT_MODEL_REPOSITORY": str(root)},
    )
    compose.down()
    try:
        result = compose.up(check=False)
        assert result.returncode == 0, f"compose up failed:\n{result.stderr}\n{compose.logs()[-3000:]}"
        yield compose, root
    finally:
        compose.down()
        shutil.rmtree(root, ignore_errors=True)


def test_the_release_serves_requests_in_flight(served: tuple[Compose, Path]) -> None:
    import onnxruntime

    compose, root = served
    client = httpclient.InferenceServerClient(HTTP_URL)
    assert client.get_server_metadata()["version"] == "2.51.0"
    session = onnxruntime.InferenceSession(
        str(root / "demo" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((1 + i % 5, 2010), dtype=np.float32) for i in range(32)]

    def one(batch: NDArray[np.float32]) -> None:
        item = httpclient.InferInput("np_script_embeddings", list(batch.shape), "FP32")
        item.set_data_from_numpy(batch)
        result = httpclient.InferenceServerClient(HTTP_URL).infer("demo", [item])
        want = session.run(["np_logits"], {"np_script_embeddings": batch})[0]
        np.testing.assert_allclose(result.as_numpy("np_logits"), want, rtol=1e-5, atol=1e-5)

    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(one, batch) for batch in batches]:
            future.result()
    logs = compose.logs()
    assert f"keeping requests in flight on {LANES} lanes" in logs, logs[-3000:]
    assert "cannot answer a request after execute returns" not in logs
