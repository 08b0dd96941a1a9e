"""Talk to a Triton server over HTTP or gRPC.

python -m client.cli health
python -m client.cli --protocol grpc --url 127.0.0.1:8001 metadata demo
python -m client.cli config demo
python -m client.cli infer demo --batch 8                      # random inputs from the model's metadata
python -m client.cli infer demo --input np_script_embeddings=x.npy --expect expected.npz
python -m client.cli infer demo --cuda-shm                     # inputs and outputs in GPU memory
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from triton_ort.testing.reference import compare, random_inputs
from triton_ort.testing.transport import infer, make_client, model_config, model_metadata, tensor_metas

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


def _load_inputs(args: argparse.Namespace, metadata: dict[str, Any]) -> dict[str, NDArray[Any]]:
    inputs = random_inputs(tensor_metas(metadata, "inputs"), args.batch, seed=args.seed)
    for item in args.input:
        name, _, path = item.partition("=")
        if name not in inputs or not path:
            sys.exit(f"--input {item!r}: expected NAME=FILE.npy with NAME one of {sorted(inputs)}")
        inputs[name] = np.load(path)
    return inputs


def _output_layout(metadata: dict[str, Any], batch: int) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
    layout = {}
    for meta in tensor_metas(metadata, "outputs"):
        shape = tuple(batch if (d < 0 and axis == 0) else d for axis, d in enumerate(meta.shape))
        if any(d < 0 for d in shape):
            sys.exit(f"--cuda-shm needs static output shapes; {meta.name} is {list(meta.shape)}")
        layout[meta.name] = (np.dtype(triton_to_np_dtype(meta.datatype)), shape)
    return layout


def run_infer(client: Any, args: argparse.Namespace) -> int:
    metadata = model_metadata(client, args.model)
    inputs = _load_inputs(args, metadata)
    if args.cuda_shm:
        from client.cuda_shm import CudaShmIO

        batch = next(iter(inputs.values())).shape[0]
        with CudaShmIO(client, args.model, inputs, _output_layout(metadata, batch)) as shm:
            latency = shm.infer()
            outputs = shm.read_outputs()
    else:
        names = [meta.name for meta in tensor_metas(metadata, "outputs")]
        outputs, latency = infer(client, args.model, inputs, names)
    for name, array in outputs.items():
        print(f"{name} {array.dtype}{list(array.shape)}\n{array}")
    print(
        f"latency {latency * 1e3:.3f} ms ({args.protocol}{', CUDA shared memory' if args.cuda_shm else ''})"
    )
    if args.save:
        np.savez(args.save, **outputs)
    if args.expect:
        expected = dict(np.load(args.expect))
        problems = compare(outputs, expected, args.rtol, args.atol)
        if problems:
            print("MISMATCH:\n  " + "\n  ".join(problems))
            return 1
        print(f"OK: outputs match {args.expect}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--url", help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("health", help="server live/ready")
    for name in ("metadata", "config"):
        commands.add_parser(name, help=f"model {name}").add_argument("model")
    infer_parser = commands.add_parser("infer", help="send one request")
    infer_parser.add_argument("model")
    infer_parser.add_argument("--batch", type=int, default=1)
    infer_parser.add_argument("--seed", type=int, default=0)
    infer_parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    infer_parser.add_argument("--expect", type=Path, help=".npz of expected outputs")
    infer_parser.add_argument("--save", type=Path, help="write the outputs to this .npz")
    infer_parser.add_argument("--cuda-shm", action="store_true", help="inputs/outputs in CUDA shared memory")
    infer_parser.add_argument("--rtol", type=float, default=1e-3)
    infer_parser.add_argument("--atol", type=float, default=1e-3)
    args = parser.parse_args()
    client = make_client(args.protocol, args.url or DEFAULT_URLS[args.protocol])
    if args.command == "health":
        live, ready = client.is_server_live(), client.is_server_ready()
        print(f"live: {live}  ready: {ready}")
        sys.exit(0 if live and ready else 1)
    if args.command in ("metadata", "config"):
        reader = model_metadata if args.command == "metadata" else model_config
        print(json.dumps(reader(client, args.model), indent=2))
        sys.exit(0)
    sys.exit(run_infer(client, args))


if __name__ == "__main__":
    main()
