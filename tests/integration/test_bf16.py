"""A model with BF16 inputs and outputs on the real tritonserver: the python backend carries BF16 from
Triton 24.08 (tritonserver 2.49) on, and there the model loads and answers; before (2.41 here), every
request would be refused ('TYPE_BF16 not currently supported'), so its load is refused instead, naming the
tensors, BF16 and the release that can. What each release does comes from harness/releases.py."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest

from tests.support import graphs
from triton_ort.harness.releases import Release, server_release
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import PROTOCOLS, infer, make_client

pytestmark = pytest.mark.integration

TWO_LINES = 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTritonServer, Release]]:
    repository = tmp_path_factory.mktemp("bf16") / "repository"
    for name, build in (("bf16", graphs.bf16_doubler), ("fp32", graphs.overridable)):
        build(repository / name / "1" / "model.onnx")
        (repository / name / "config.pbtxt").write_text(TWO_LINES)
    with LocalTritonServer(repository, extra_args=["--exit-on-error=false"]) as server:
        yield server, server_release(server.http_url)


def test_a_bf16_model_loads_only_where_the_python_backend_carries_bf16(
    served: tuple[LocalTritonServer, Release],
) -> None:
    server, release = served
    failed = [line for line in server.failed_models() if line.startswith("model 'bf16'")]
    if release.carries_bf16:
        assert not failed, failed
        return
    assert len(failed) == 1, server.log()[-3000:]
    assert "input 'x', output 'y' are BF16, which this server's python backend cannot carry" in failed[0]
    assert "Triton 24.08 (tritonserver 2.49)" in failed[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_where_bf16_is_carried_the_model_answers(
    served: tuple[LocalTritonServer, Release], protocol: str
) -> None:
    server, release = served
    client = make_client(protocol, server.http_url if protocol == "http" else server.grpc_url)
    if not release.carries_bf16:
        assert not client.is_model_ready("bf16") and client.is_model_ready("fp32")
        return
    x = np.array([[1.5, -2.0, 3.0, 0.25], [0.0, 8.0, -0.5, 100.0]], ml_dtypes.bfloat16)
    outputs, _ = infer(client, "bf16", {"x": x}, ["y"])
    assert outputs["y"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(outputs["y"].astype(np.float32), 2 * x.astype(np.float32))
