"""One HTTP and one gRPC request to a model, checked against in-process ONNX Runtime; exit 1 on a mismatch.

python -m client.smoke --local                      # start the local tritonserver, check, stop it
python -m client.smoke --http-url H:8000 --grpc-url H:8001   # check a running server
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from triton_ort.cli.args import one_line
from triton_ort.harness.reference import compare, random_inputs, reference_outputs
from triton_ort.harness.server import exit_on_termination
from triton_ort.harness.transport import infer, make_client, model_metadata, tensor_metas


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if not args.local:
        yield args.http_url, args.grpc_url
        return
    from triton_ort.harness.checks import ServerStartError
    from triton_ort.harness.server import LocalTritonServer

    print(f"starting the local tritonserver on {args.model_repository} ...", flush=True)
    server = LocalTritonServer(args.model_repository)
    try:
        server.start()
    except ServerStartError as error:
        sys.exit(str(error))  # the failing model's own error first, then the kept log's path
    try:
        print(f"ready: HTTP {server.http_url}, gRPC {server.grpc_url}", flush=True)
        yield server.http_url, server.grpc_url
    finally:
        server.stop()
    print("tritonserver stopped", flush=True)


def check(protocol: str, url: str, args: argparse.Namespace) -> list[str]:
    client = make_client(protocol, url)
    if not client.is_model_ready(args.model):
        return [f"{protocol}: model {args.model!r} is not ready at {url}"]
    metadata = model_metadata(client, args.model)
    inputs = random_inputs(tensor_metas(metadata, "inputs"), args.batch, seed=args.seed)
    output_names = [meta.name for meta in tensor_metas(metadata, "outputs")]
    got, latency = infer(client, args.model, inputs, output_names)
    want = reference_outputs(args.model_repository / args.model / "1" / "model.onnx", inputs)
    np.set_printoptions(precision=5, suppress=True)
    for name, array in got.items():
        print(
            f"{protocol:>4} {url}  {name} {array.dtype}{list(array.shape)}  {latency * 1e3:.2f} ms\n{array}"
        )
    return [f"{protocol}: {problem}" for problem in compare(got, want, args.rtol, args.atol)]


def main() -> None:
    exit_on_termination()  # `make run` stopped by a supervisor still stops its server
    parser = argparse.ArgumentParser(
        prog="python -m client.smoke",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--local", action="store_true", help="start (and stop) the local tritonserver")
    parser.add_argument("--http-url", default="127.0.0.1:8000")
    parser.add_argument("--grpc-url", default="127.0.0.1:8001")
    parser.add_argument("--model-repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    # TF32 on the GPU changes the last bits; the CPU path matches far more tightly than this.
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-3)
    args = parser.parse_args()
    with _server(args) as (http_url, grpc_url):
        problems = []
        for protocol, url in (("http", http_url), ("grpc", grpc_url)):
            try:
                problems += check(protocol, url, args)
            except (InferenceServerException, OSError) as error:  # unreachable server, unknown model
                parser.exit(1, f"{parser.prog}: error: {protocol} {url}: {one_line(error)}\n")
    if problems:
        print("MISMATCH against in-process ONNX Runtime:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("OK: HTTP and gRPC answers match in-process ONNX Runtime")


if __name__ == "__main__":
    main()
