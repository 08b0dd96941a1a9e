"""PyTriton serving the same ORT IO-binding function (benchmark anchor). PyTriton has no GPU transport:
inputs arrive as numpy and outputs leave as numpy, so each request pays host<->device copies.

    python -m client.anchors.pytriton_server --onnx bench_repository/demo/1/model.onnx --name demo \
        --http-port 8100 --grpc-port 8101 --metrics-port 8102
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray


def main() -> None:
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

    parser = argparse.ArgumentParser()
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument(
        "--workspace", type=Path, help="PyTriton's model store and sockets (default: under ~/.cache/pytriton)"
    )
    args = parser.parse_args()

    stream = torch.cuda.Stream() if torch.cuda.is_available() else None  # type: ignore[no-untyped-call]
    placement = Placement("cuda", 0, stream.cuda_stream) if stream else Placement("cpu")
    runner = IOBindingRunner(create_session(args.onnx, ModelOptions(), placement), placement)
    input_spec, output_spec = runner.inputs[0], runner.outputs[0]

    @batch  # type: ignore[misc]
    def infer(**inputs: NDArray[Any]) -> dict[str, NDArray[Any]]:
        with torch.cuda.stream(stream) if stream else contextlib.nullcontext():
            tensors = {name: torch.from_numpy(array) for name, array in inputs.items()}
            outputs = runner.run(tensors)
            return {name: tensor.cpu().numpy() for name, tensor in outputs.items()}

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
    )
    with Triton(config=config, workspace=args.workspace) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=infer,
            inputs=[Tensor(name=input_spec.name, dtype=np.float32, shape=tuple(input_spec.shape[1:]))],
            outputs=[Tensor(name=output_spec.name, dtype=np.float32, shape=tuple(output_spec.shape[1:]))],
            config=ModelConfig(max_batch_size=1024),
        )
        triton.serve()


if __name__ == "__main__":
    main()
