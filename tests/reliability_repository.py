"""The model repository of the reliability tests: tests/repository.py's models plus the ones that reach
model.py with requests that must fail (or pass) one by one, and an upstream model that hands a strided
tensor on to the demo.

- `demo_batched`: the demo with a long queue delay, so that concurrent requests share one execute().
- `ragged_add`: x[b,n] + y[b,m] with ragged batching allowed, so that requests of different inner shapes
  share one execute() and model.py must group them (and a request with n != m fails inside ORT).
- `blowup`: out = x, but through an intermediate of shape [b, max(size)]: a request with a huge `size`
  asks ORT for more memory than the machine (or the GPU) has, in a bounded way (the allocation is refused,
  nothing is touched).
- `strided_upstream`: a python model (BLS) that turns its input into a non-contiguous or offset torch
  tensor and sends it to `demo` through DLPack, as an upstream model in a pipeline would.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

from onnx import TensorProto, helper

from tests import graphs
from tests.paths import MODEL_REPOSITORY, pin_one_instance
from tests.repository import _config, _tensor, add_model, build_test_repository

LONG_QUEUE_DELAY_US = 200_000


def blowup(path: Path) -> Path:
    """x float[b,1], size int64[b,1] -> out = ReduceMax(Expand(x, [1, max(size)]), axis 1) = x.

    The answer is x for any size; the memory ORT needs is b * max(size) floats."""
    v = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["size"], ["widest"], keepdims=0),
            helper.make_node("Reshape", ["widest", "one_dim"], ["widest_1d"]),
            helper.make_node("Concat", ["one", "widest_1d"], ["shape"], axis=0),
            helper.make_node("Expand", ["x", "shape"], ["wide"]),
            helper.make_node("ReduceMax", ["wide"], ["out"], axes=[1], keepdims=1),  # opset 17: attribute
        ],
        "blowup",
        [v("x", TensorProto.FLOAT, ["batch", 1]), v("size", TensorProto.INT64, ["batch", 1])],
        [v("out", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            helper.make_tensor("one_dim", TensorProto.INT64, [1], [1]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        ],
    )
    return graphs._save(graph, path)


def _with_long_queue_delay(config: str, name: str) -> str:
    config = config.replace('name: "demo"', f'name: "{name}"')
    return re.sub(
        r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {LONG_QUEUE_DELAY_US}", config
    )


def _ragged_config() -> str:
    ragged = '{{ name: "{}", data_type: TYPE_FP32, dims: [ -1 ], allow_ragged_batch: true }}'
    return _config(
        "ragged_add",
        [ragged.format("x"), ragged.format("y")],
        [_tensor("z", "FP32", [-1])],
        queue_delay_us=LONG_QUEUE_DELAY_US,
        kind="KIND_CPU",  # the test pins ORT's CPU message; the GPU tests have their own models
    )


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

STRIDED_UPSTREAM_CONFIG = """name: "strided_upstream"
backend: "python"
max_batch_size: 0
input [
  { name: "x", data_type: TYPE_FP32, dims: [ -1, 2010 ] },
  { name: "mode", data_type: TYPE_INT32, dims: [ 1 ] }
]
output [ { name: "np_logits", data_type: TYPE_FP32, dims: [ -1, 2 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""


def add_python_model(repository: Path, name: str, model_py: str, config: str) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(textwrap.dedent(model_py))
    (repository / name / "config.pbtxt").write_text(config)


def build_reliability_repository(repository: Path) -> Path:
    """demo, multi_io, gather (tests/repository.py) and the models above."""
    build_test_repository(repository)
    batched = repository / "demo_batched"
    shutil.copytree(repository / "demo", batched)
    demo_config = (MODEL_REPOSITORY / "demo" / "config.pbtxt").read_text()
    (batched / "config.pbtxt").write_text(_with_long_queue_delay(demo_config, "demo_batched"))
    pin_one_instance(batched)
    add_model(repository, "ragged_add", graphs.pairwise_add, _ragged_config())
    add_model(
        repository,
        "blowup",
        blowup,
        _config(
            "blowup",
            [_tensor("x", "FP32", [1]), _tensor("size", "INT64", [1])],
            [_tensor("out", "FP32", [1])],
            queue_delay_us=LONG_QUEUE_DELAY_US,
            kind="KIND_CPU",  # host memory here; tests/reliability/test_gpu_memory.py runs it on the GPU
        ),
    )
    add_python_model(repository, "strided_upstream", STRIDED_UPSTREAM_MODEL_PY, STRIDED_UPSTREAM_CONFIG)
    return repository


def build_demo_repository(repository: Path) -> Path:
    """The demo alone, as shipped but with one instance (for the fault tests, which restart or stop their
    own server)."""
    from tests.paths import demo_onnx

    shutil.copytree(MODEL_REPOSITORY / "demo", repository / "demo")
    shutil.copy(demo_onnx(), repository / "demo" / "1" / "model.onnx")
    pin_one_instance(repository / "demo")  # one stub to kill, stop or count
    return repository
