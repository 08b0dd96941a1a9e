"""The model repositories of the server tests, each model served by the same generic model.py and
written into a temporary directory from typed specs (triton_ort.harness.repository).

- `demo` (one instance), `multi_io` (fp16, int64, bool), `gather` (an index out of range fails inside ORT,
  for that request's values only): the integration tests.
- The reliability tests add `demo_batched` (the demo with a long queue delay, so that concurrent requests
  share one execute()), `ragged_add` (x[b,n] + y[b,m] with ragged batching: requests of different inner
  shapes share one execute() and one with n != m fails inside ORT), `blowup` (an intermediate of
  [b, max(size)] floats: a huge `size` asks ORT for more memory than the machine has, and is refused
  before anything is touched), and `strided_upstream` (a BLS model that hands `demo` a non-contiguous or
  offset torch tensor through DLPack, as an upstream model in a pipeline would).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.paths import DEMO_MODEL_PY, MODEL_REPOSITORY, demo_onnx
from triton_ort.harness.repository import (
    ModelSpec,
    TensorSpec,
    add_model,
    copy_model,
    pin_one_instance,
    read_config,
    write_config,
)

LONG_QUEUE_DELAY_US = 200_000

MULTI_IO = ModelSpec(
    "multi_io",
    (TensorSpec("a", "FP16", (3,)), TensorSpec("b", "INT64", (4,)), TensorSpec("c", "BOOL", (2,))),
    (
        TensorSpec("a_twice", "FP16", (3,)),
        TensorSpec("b_sum", "INT64", (1,)),
        TensorSpec("c_not", "BOOL", (2,)),
    ),
)
# A long queue delay so that concurrent requests reach one execute() together. On the CPU everywhere:
# ORT's CUDA GatherElements does not bounds-check its indices (an out-of-range index returns garbage
# instead of failing), and this model exists to fail one request of a batch.
GATHER = ModelSpec(
    "gather",
    (TensorSpec("x", "FP32", (4,)), TensorSpec("idx", "INT64", (1,))),
    (TensorSpec("out", "FP32", (1,)),),
    queue_delay_us=LONG_QUEUE_DELAY_US,
    kind="KIND_CPU",
)
# KIND_CPU: host memory here; tests/reliability/test_gpu_memory.py runs a KIND_GPU copy.
BLOWUP = ModelSpec(
    "blowup",
    (TensorSpec("x", "FP32", (1,)), TensorSpec("size", "INT64", (1,))),
    (TensorSpec("out", "FP32", (1,)),),
    queue_delay_us=LONG_QUEUE_DELAY_US,
    kind="KIND_CPU",
)
RAGGED_ADD = ModelSpec(
    "ragged_add",
    (TensorSpec("x", "FP32", (-1,), allow_ragged_batch=True), TensorSpec("y", "FP32", (-1,), True)),
    (TensorSpec("z", "FP32", (-1,)),),
    queue_delay_us=LONG_QUEUE_DELAY_US,
    kind="KIND_CPU",  # the test pins ORT's CPU message; the GPU tests have their own models
)
STRIDED_UPSTREAM = ModelSpec(
    "strided_upstream",
    (TensorSpec("x", "FP32", (-1, 2010)), TensorSpec("mode", "INT32", (1,))),
    (TensorSpec("np_logits", "FP32", (-1, 2)),),
    max_batch_size=0,
    queue_delay_us=None,
    kind="KIND_CPU",
    parameters={},
)


def build_demo_repository(repository: Path) -> Path:
    """The demo alone, as shipped but with one instance: one stub to kill, stop, count or read in order."""
    shutil.copytree(MODEL_REPOSITORY / "demo", repository / "demo")
    shutil.copy(demo_onnx(), repository / "demo" / "1" / "model.onnx")
    pin_one_instance(repository / "demo")
    return repository


def with_custom_metrics(model_dir: Path) -> None:
    """The model's custom metrics on whatever the release: `auto` turns them off where the python backend
    restarts a stub that dies (Triton 2.41: docs/reliability.md), and a test that reads them needs them."""
    config = read_config(model_dir)
    config.parameters["custom_metrics"].string_value = "true"
    write_config(model_dir, config)


def keep_in_flight(model_dir: Path, lanes: int) -> None:
    """The model, one instance, keeping requests in flight on `lanes` lanes, without CUDA graphs, which the
    mode refuses on a GPU (docs/inflight.md); a release without the response sender serves it classic."""
    pin_one_instance(model_dir)
    config = read_config(model_dir)
    config.parameters["inflight_lanes"].string_value = str(lanes)
    config.optimization.cuda.graphs = False
    write_config(model_dir, config)


def build_test_repository(repository: Path) -> Path:
    build_demo_repository(repository)
    add_model(repository, MULTI_IO, DEMO_MODEL_PY, graphs.multi_io)
    add_model(repository, GATHER, DEMO_MODEL_PY, graphs.gather_elements)
    return repository


def build_mismatch_repository(repository: Path) -> Path:
    """A demo whose config.pbtxt disagrees with its ONNX file (dtype and inner dimension)."""
    spec = ModelSpec(
        "mismatch",
        (TensorSpec("np_script_embeddings", "FP32", (2000,)),),
        (TensorSpec("np_logits", "FP16", (2,)),),
    )
    add_model(repository, spec, DEMO_MODEL_PY, lambda path: Path(shutil.copy(demo_onnx(), path)))
    return repository


def _long_queue_delay(config: model_config_pb2.ModelConfig) -> None:
    config.dynamic_batching.max_queue_delay_microseconds = LONG_QUEUE_DELAY_US


def build_reliability_repository(repository: Path) -> Path:
    """The test repository and the models above."""
    build_test_repository(repository)
    copy_model(repository / "demo", repository, "demo_batched", _long_queue_delay)
    add_model(repository, RAGGED_ADD, DEMO_MODEL_PY, graphs.pairwise_add)
    add_model(repository, BLOWUP, DEMO_MODEL_PY, graphs.blowup)
    add_model(repository, STRIDED_UPSTREAM, STRIDED_UPSTREAM_MODEL_PY)
    return repository


STRIDED_UPSTREAM_MODEL_PY = '''\
"""Upstream model (BLS): hands its input to `demo` as a torch tensor through DLPack, laid out as `mode`
says: 0 contiguous, 1 transposed storage (column-major), 2 a row view with a storage offset, 3 every
other column of a wider tensor, 4 a transposed numpy view (pb_utils.Tensor, not DLPack)."""

import numpy as np
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


def _layout(x, mode):
    rows, cols = x.shape
    if mode == 0:
        return x.clone()
    if mode == 1:
        return x.t().contiguous().t()
    if mode == 2:
        padded = torch.zeros(rows + 1, cols, dtype=x.dtype)
        padded[1:] = x
        return padded[1:]
    if mode == 3:
        wide = torch.zeros(rows, 2 * cols, dtype=x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    raise ValueError(f"unknown mode {mode}")


def _error(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "x").to_dlpack())
            mode = int(pb_utils.get_input_tensor_by_name(request, "mode").as_numpy().reshape(-1)[0])
            try:
                if mode == 4:
                    view = np.ascontiguousarray(x.numpy().T).T
                    tensor = pb_utils.Tensor("np_script_embeddings", view)
                else:
                    strided = _layout(x, mode)
                    capsule = torch.utils.dlpack.to_dlpack(strided)
                    tensor = pb_utils.Tensor.from_dlpack("np_script_embeddings", capsule)
            except Exception as error:
                responses.append(_error(f"upstream could not hand the tensor over (mode {mode}): {error}"))
                continue
            reply = pb_utils.InferenceRequest(
                model_name="demo", requested_output_names=["np_logits"], inputs=[tensor]
            ).exec()
            if reply.has_error():
                responses.append(_error(f"demo answered an error: {reply.error().message()}"))
                continue
            logits = pb_utils.get_output_tensor_by_name(reply, "np_logits")
            responses.append(pb_utils.InferenceResponse(output_tensors=[logits]))
        return responses
'''
