"""fp32 precision on the GPU, served: ORT's CUDA EP runs fp32 MatMul/Gemm in TF32 by default (a 10-bit
mantissa on Ampere and later), so served answers differ from ORT on the CPU in the third decimal; the
native accelerator key `use_tf32: "0"` turns it off and the same model then answers within 1e-5 of the CPU.
docs/gpu-hosts.md, "Answers on the GPU: TF32"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.graphs import save
from tests.support.paths import TF32_TOLERANCE, Tolerance
from tests.support.readme import readme_blocks
from triton_ort.harness.reference import reference_outputs

pytestmark = pytest.mark.gpu

ROWS, K, N = 32, 256, 128
FP32_TOLERANCE: Tolerance = {"rtol": 1e-5, "atol": 1e-5}


def _gemm(path: Path) -> Path:
    """y = x @ w + b with w scaled so that y is of order 1 (the tolerances are then absolute and relative
    alike). fp32 summation orders differ by ~1e-6 here; TF32's rounding of x and w by ~1e-3."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array((rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])],
        initializer=[w, b],
    )
    return save(graph, path)


def test_tf32_is_the_default_and_use_tf32_0_answers_as_the_cpu(tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    from triton_ort.harness.server import LocalTritonServer

    tf32_off = readme_blocks()["tf32"]  # the lines docs/gpu-hosts.md gives
    assert 'key: "use_tf32" value: "0"' in tf32_off, tf32_off
    repository = tmp_path / "repository"
    headline = 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 64\n'
    for name, extra in {"tf32_default": "", "tf32_off": tf32_off}.items():
        (repository / name / "1").mkdir(parents=True)
        onnx_file = _gemm(repository / name / "1" / "model.onnx")
        (repository / name / "config.pbtxt").write_text(headline + extra)
    x = np.random.default_rng(0).standard_normal((ROWS, K)).astype(np.float32)
    want = reference_outputs(onnx_file, {"x": x})["y"]
    got = {}
    with LocalTritonServer(repository) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        for name in ("tf32_default", "tf32_off"):
            request = httpclient.InferInput("x", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            got[name] = client.infer(name, [request]).as_numpy("y")
    worst = {name: float(np.max(np.abs(out - want))) for name, out in got.items()}
    print(f"max |served - CPU|: {worst}")  # the H200's figures go into docs/gpu-hosts.md
    np.testing.assert_allclose(got["tf32_off"], want, **FP32_TOLERANCE, err_msg="use_tf32 0")
    np.testing.assert_allclose(got["tf32_default"], want, **TF32_TOLERANCE, err_msg="TF32 (default)")
    # TF32 really is the default on this GPU (Ampere or later): the option is what makes the difference.
    assert worst["tf32_default"] > FP32_TOLERANCE["atol"], worst
    assert onnx.load(str(onnx_file)).graph.node[0].op_type == "MatMul"
