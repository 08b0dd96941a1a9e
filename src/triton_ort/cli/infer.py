"""Talk to a Triton server over HTTP or gRPC.

triton-ort health
triton-ort metadata demo --protocol grpc --url 127.0.0.1:8001
triton-ort served-config demo
triton-ort infer demo --batch 8                      # random inputs from the model's metadata
triton-ort infer bert --batch 4 --shape input_ids:16 --shape attention_mask:16   # dims without the batch
triton-ort infer demo --input np_script_embeddings=x.npy --expect expected.npz
triton-ort infer my_model --inputs inputs.npz --expect expected.npz   # every input from one .npz, by name
triton-ort infer demo --cuda-shm                     # inputs and outputs in GPU memory

Requests are checked against the model's config before they are sent (batch within max_batch_size,
input names, dtypes and shapes). Exit status: 0 success, 1 wrong answer (--expect) or a server that could
not be reached or refused the request, 2 a request or argument that was wrong (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from triton_ort.cli.args import DEFAULT_URLS, OneLineParser, host_port, one_line, positive_int
from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.cli.request_data import (
    INPUT_DATA_MODES,
    add_request_data_options,
    check_range_names,
    generated,
    input_value_ranges,
    json_requests,
    open_axes_error,
    parse_ranges_option,
    read_npz,
    shape_example,
    sized_by_shape,
    unsized_inputs,
    unsized_text,
)
from triton_ort.harness.reference import compare
from triton_ort.harness.transport import (
    TensorMeta,
    infer,
    make_client,
    model_config,
    model_metadata,
    tensor_metas,
)
from triton_ort.model.input_ranges import describe


def _read_npy(item: str, signature: ModelSignature) -> tuple[str, NDArray[Any]]:
    name, _, path = item.partition("=")
    names = ", ".join(spec.name for spec in signature.inputs)
    if not name or not path:
        raise RequestError(f"--input {item!r}: expected NAME=FILE.npy with NAME one of {names}")
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise RequestError(f"--input {item!r}: cannot read {path} as a .npy array ({error})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive: several arrays, not one input
        raise RequestError(f"--input {item!r}: {path} holds several arrays (.npz); expected one .npy array")
    return name, array


ONE_LENGTH_NOTE = "note: no --shape and no data given, so each open axis is 1 long"


def _files(
    args: argparse.Namespace, signature: ModelSignature, metas: dict[str, TensorMeta]
) -> tuple[dict[str, Any], list[str]]:
    """The inputs given as files: --inputs FILE.npz, --input-data FILE (.npz, or perf_analyzer's JSON: its
    first request's data), --input NAME=FILE.npy; and the --shape items left for the other inputs."""
    given = read_npz(args.inputs) if args.inputs else {}
    data, shapes = args.input_data, list(args.shape)
    if data not in INPUT_DATA_MODES:
        path = Path(data)
        if path.suffix == ".json":
            batched = signature.max_batch_size > 0
            requests, shapes = json_requests(path, metas, batched, shapes, args.batch)
            more = requests[0]
        else:
            more = read_npz(path)
        for name in more:
            if name in given:
                raise RequestError(
                    f"--input-data {data}: {name!r} is in --inputs {args.inputs} too; give it once"
                )
        given.update(more)
    for name, array in (_read_npy(item, signature) for item in args.input):
        if name in given:
            source = f"--inputs {args.inputs}" if args.inputs else f"--input-data {args.input_data}"
            raise RequestError(f"--input {name}=...: {name!r} is in {source} too; give it once")
        given[name] = array
    return given, shapes


def _load_inputs(
    args: argparse.Namespace, signature: ModelSignature, metadata: dict[str, Any], config: dict[str, Any]
) -> dict[str, NDArray[Any]]:
    """The files' inputs and the --shape inputs, checked against the model's config; every other input
    made up (--input-data random, the default, or zero) of their batch, except optional ones (`optional:
    true`, an overridable initializer): left out, so the model uses its default. Integers take values in
    their range (request_data: --range, the served config's input_ranges, else 0 or 1).

    --shape gives an input's dims without the batch axis (the batch is --batch), or its whole shape, batch
    first; --batch beside a batch that files or a whole shape set must agree. Open axes follow perf's and
    tune's rule (request_data.open_axes_error): where any data or --shape is given, inputs whose open axes
    nothing sizes are one error naming them all, not data of a guessed length that the server then
    refuses for an axis. Given nothing at all (the README's first request of any model), every open axis
    is 1 and one line on stderr says so, with the --shape options for other lengths."""
    metas = {meta.name: meta for meta in tensor_metas(metadata, "inputs")}
    required = {name: meta for name, meta in metas.items() if name not in signature.optional_inputs}
    datatypes = {name: meta.datatype for name, meta in metas.items()}
    overrides = parse_ranges_option(args.range)
    check_range_names(overrides, list(metas))
    ranges = input_value_ranges(datatypes, config, overrides)
    if args.verbose:
        for line in describe(ranges):
            print(line, file=sys.stderr)
    mode = args.input_data if args.input_data in INPUT_DATA_MODES else "random"
    batched = signature.max_batch_size > 0
    given, shape_items = _files(args, signature, metas)
    batch = signature.check_inputs(given) if given else None
    shapes, batch, where = sized_by_shape(
        shape_items, signature.model, metas, given, "the files", batched, batch, "the files' first axis"
    )
    if args.batch is not None and batch is not None and args.batch != batch:
        raise RequestError(f"--batch {args.batch}: the batch is {where}, {batch}; leave --batch out")
    batch = batch or args.batch or 1
    signature.check_batch(batch)  # before building the arrays: a refused batch costs nothing
    unsized = unsized_inputs(metas, batched, {*given, *signature.optional_inputs}, shapes)
    if unsized and (given or shapes):  # data of a guessed length beside them: the server refuses an axis
        raise open_axes_error(unsized, "--input NAME=FILE.npy, --inputs FILE.npz, --input-data FILE")
    if unsized:  # nothing given: the README's first request of any model, every open axis 1, said so
        print(
            f"{ONE_LENGTH_NOTE}: {unsized_text(unsized)}; for other lengths: {shape_example(unsized)}",
            file=sys.stderr,
        )
    rng = np.random.default_rng(args.seed)
    made = {}
    for name, meta in required.items():
        if name in given:
            continue
        own = shapes.get(name) or tuple(
            1 if d < 0 else d for d in (meta.shape[1:] if batched else meta.shape)
        )
        made[name] = generated(meta.datatype, (batch, *own) if batched else own, rng, mode, ranges.get(name))
    return {**made, **given}


def _output_layout(metadata: dict[str, Any], batch: int) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
    layout = {}
    for meta in tensor_metas(metadata, "outputs"):
        shape = tuple(batch if (d < 0 and axis == 0) else d for axis, d in enumerate(meta.shape))
        if any(d < 0 for d in shape):
            sys.exit(f"--cuda-shm needs static output shapes; {meta.name} is {list(meta.shape)}")
        layout[meta.name] = (np.dtype(triton_to_np_dtype(meta.datatype)), shape)
    return layout


def _read_expected(path: Path) -> dict[str, NDArray[Any]]:
    if not path.is_file():
        raise RequestError(f"--expect {path}: no such file; expected an .npz of outputs (--save)")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise RequestError(
            f"--expect {path}: cannot read it ({error}); expected an .npz of outputs (--save)"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise RequestError(f"--expect {path}: one array (.npy); expected an .npz of outputs by name (--save)")
    return dict(archive)


def _cuda_shm_infer(
    client: Any, args: argparse.Namespace, inputs: dict[str, NDArray[Any]], metadata: dict[str, Any]
) -> tuple[dict[str, NDArray[Any]], float]:
    from triton_ort.cli.cuda_shm import CudaShmIO

    batch = next(iter(inputs.values())).shape[0]
    try:
        from tritonclient.utils.cuda_shared_memory import CudaSharedMemoryException
    except ImportError as error:  # tritonclient imports cuda.bindings for it: not installed on CPU hosts
        raise RequestError(f"--cuda-shm needs a CUDA GPU and cuda-bindings on this host ({error})") from None
    try:
        with CudaShmIO(client, args.model, inputs, _output_layout(metadata, batch)) as shm:
            latency = shm.infer()
            return shm.read_outputs(), latency
    except CudaSharedMemoryException as error:
        raise RequestError(f"--cuda-shm needs a CUDA GPU on this host: {one_line(error)}") from None


def summary(name: str, array: NDArray[Any], full: bool) -> str:
    """One line per output (its first values and range), or the whole array with --full."""
    header = f"{name} {array.dtype}{list(array.shape)}"
    if full:
        return f"{header}\n{np.array2string(array, threshold=sys.maxsize)}"
    flat = array.reshape(-1)
    first = np.array2string(flat[:6], precision=4, separator=", ")[1:-1] + (", ..." if flat.size > 6 else "")
    if flat.size and array.dtype.kind in "biuf":
        values = flat.astype(np.float64)
        return f"{header}  [{first}]  min {values.min():.4g} max {values.max():.4g} mean {values.mean():.4g}"
    return f"{header}  [{first}]"


def run_infer(client: Any, args: argparse.Namespace) -> int:
    expected = _read_expected(args.expect) if args.expect else None  # before anything is sent
    metadata = model_metadata(client, args.model)
    config = model_config(client, args.model)
    signature = ModelSignature.from_config(config)
    inputs = _load_inputs(args, signature, metadata, config)
    if args.cuda_shm:
        outputs, latency = _cuda_shm_infer(client, args, inputs, metadata)
    else:
        names = [meta.name for meta in tensor_metas(metadata, "outputs")]
        outputs, latency = infer(client, args.model, inputs, names)
    for name, array in outputs.items():
        print(summary(name, array, args.full))
    print(
        f"latency {latency * 1e3:.3f} ms ({args.protocol}{', CUDA shared memory' if args.cuda_shm else ''})"
    )
    if args.save:
        np.savez(args.save, **outputs)
    if args.expect and expected is not None:
        # ONNX Runtime's outputs (the usual --expect file) have the model's shape, which a config's reshape
        # maps to what the server answers: a label [N] is [N, 1] on the wire (docs/serving-your-model.md,
        # what the config needs).
        served = {
            name: signature.as_served(name, array, outputs[name].shape) if name in outputs else array
            for name, array in expected.items()
        }
        problems = compare(outputs, served, args.rtol, args.atol)
        if problems:
            print("MISMATCH:\n  " + "\n  ".join(problems))
            return 1
        print(f"OK: outputs match {args.expect}")
    return 0


def _connection_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--protocol",
        choices=["http", "grpc"],
        default=default,
        help="how to talk to the server (default http)",
    )
    parser.add_argument(
        "-u",  # as perf and Triton's perf_analyzer take it
        "--url",
        type=host_port,
        default=default,
        help="host:port (default 127.0.0.1:8000 for http, 127.0.0.1:8001 for grpc)",
    )


def build_parser(prog: str) -> OneLineParser:
    parser = OneLineParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _connection_options(parser, None)
    # Also after the command (`infer demo --url ...`); SUPPRESS keeps a subcommand from resetting the
    # value given before it.
    connection = OneLineParser(add_help=False)
    _connection_options(connection, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("health", help="server live/ready", parents=[connection])
    for name, what in (("metadata", "metadata"), ("served-config", "config")):
        commands.add_parser(name, help=f"model {what} (from the server)", parents=[connection]).add_argument(
            "model", help="the model's name on the server"
        )
    infer_parser = commands.add_parser("infer", help="send one request", parents=[connection])
    infer_parser.add_argument("model", help="the model's name on the server")
    infer_parser.add_argument(
        "--batch",
        type=positive_int,
        help="rows per input (default 1; files, or a --shape with the batch axis, set it themselves)",
    )
    infer_parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random inputs (default 0: the same data each run)"
    )
    infer_parser.add_argument(
        "--inputs",
        type=Path,
        metavar="FILE.npz",
        help="inputs by name from one .npz (np.savez(FILE, **inputs)); --input adds others",
    )
    infer_parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy", help="one input from a .npy file"
    )
    infer_parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2,...",
        help="an input's dims without the batch axis, for its open axes (as perf's and perf_analyzer's "
        "--shape; NAME=... too, and the whole shape with the batch axis first sets the batch)",
    )
    add_request_data_options(infer_parser)
    infer_parser.add_argument(
        "--expect",
        type=Path,
        metavar="FILE.npz",
        help=".npz of expected outputs by name (as --save writes them, or ONNX Runtime's: an output the "
        "config reshapes is compared in the served shape)",
    )
    infer_parser.add_argument("--save", type=Path, metavar="FILE.npz", help="write the outputs to this .npz")
    infer_parser.add_argument("--full", action="store_true", help="print whole output arrays, not a summary")
    infer_parser.add_argument("--cuda-shm", action="store_true", help="inputs/outputs in CUDA shared memory")
    infer_parser.add_argument(
        "--rtol",
        type=float,
        default=1e-3,
        help="--expect: relative tolerance of float outputs (default 1e-3)",
    )
    infer_parser.add_argument(
        "--atol",
        type=float,
        default=1e-3,
        help="--expect: absolute tolerance of float outputs (default 1e-3)",
    )
    return parser


def main(argv: list[str] | None = None, prog: str = "triton-ort") -> None:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.protocol = args.protocol or "http"
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        sys.exit(run_command(args, make_client(args.protocol, url)))
    except RequestError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except (InferenceServerException, OSError) as error:
        parser.exit(1, f"{parser.prog}: error: {args.protocol} {url}: {one_line(error)}\n")


def run_command(args: argparse.Namespace, client: Any) -> int:
    if args.command == "health":
        live, ready = client.is_server_live(), client.is_server_ready()
        print(f"live: {live}  ready: {ready}")
        return 0 if live and ready else 1
    if args.command in ("metadata", "served-config"):
        reader = model_metadata if args.command == "metadata" else model_config
        print(json.dumps(reader(client, args.model), indent=2))
        return 0
    return run_infer(client, args)


if __name__ == "__main__":
    main()
