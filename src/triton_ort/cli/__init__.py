"""`triton-ort`, the installed command (pyproject's [project.scripts]): one entry point over the project's
tools, so that they run from any folder of a venv where the project is installed.

    triton-ort serve --model-repository DIR     # the local tritonserver (triton_ort.harness.server)
    triton-ort config DIR/MODEL                 # the auto-completed config.pbtxt of a model folder, offline
    triton-ort infer MODEL ...                  # one request (triton_ort.cli.infer); health, metadata,
    triton-ort served-config MODEL              #   and the config a running server serves
    triton-ort perf MODEL --concurrency 1 2 4 8   # latency and throughput (triton_ort.cli.perf)
    triton-ort tune DIR/MODEL --batch 8           # candidate configs measured, the best written
    triton-ort backend install --backend-directory DIR

Each command's module is imported only when it runs: `config` needs no server and `serve` no client.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

PROG = "triton-ort"
_CLIENT_COMMANDS = ("infer", "health", "metadata", "served-config")  # triton_ort.cli.infer's parser
_HELP = {
    "serve": "serve a model repository with the local tritonserver (Ctrl-C stops it)",
    "config": "print the auto-completed config.pbtxt of a model folder (offline, no server)",
    "infer": "send one request to a model and check or save its outputs",
    "health": "whether the server is live and ready",
    "metadata": "a model's metadata, from the server",
    "served-config": "a model's config as the server serves it",
    "perf": "latency and throughput of a served model over a concurrency sweep (as perf_analyzer)",
    "tune": "serve a model folder under candidate configs, measure each, write the best (config.tuned.pbtxt)",
    "backend": "install the backend onnxruntime_zerocopy into a Triton backend directory",
}


def _usage() -> str:
    lines = [f"usage: {PROG} COMMAND [ARGS] (COMMAND --help for its own)", "", "commands:"]
    lines += [f"  {name:<14} {text}" for name, text in _HELP.items()]
    return "\n".join(lines)


def _config(argv: list[str]) -> int:
    import argparse

    from triton_ort.cli.config import ConfigCommandError, config_text, parse_triton_version

    parser = argparse.ArgumentParser(prog=f"{PROG} config", description=_HELP["config"])
    parser.add_argument("model_dir", type=Path, help="a model folder: config.pbtxt and version folders")
    parser.add_argument(
        "--triton-version",
        metavar="VERSION",
        help="the tritonserver that will serve the model (2.41, or its release 23.12): what its python "
        "backend cannot carry is refused as its load would refuse it (BF16 before 24.08)",
    )
    args = parser.parse_args(argv)
    try:
        version = None if args.triton_version is None else parse_triton_version(args.triton_version)
    except ValueError as error:
        parser.error(str(error))
    try:
        text, notes = config_text(args.model_dir, version)
    except ConfigCommandError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(text, end="", flush=True)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _serve(argv: list[str]) -> int:
    from triton_ort.cli.serve import main as serve

    serve(argv, prog=f"{PROG} serve")
    return 0


def _perf(argv: list[str]) -> int:
    from triton_ort.cli.perf import main as perf

    perf(argv, prog=f"{PROG} perf")
    return 0


def _tune(argv: list[str]) -> int:
    from triton_ort.cli.tune import main as tune

    tune(argv, prog=f"{PROG} tune")
    return 0


def _backend(argv: list[str]) -> int:
    from triton_ort.backend.__main__ import main as backend

    return backend(argv, prog=f"{PROG} backend")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        sys.exit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    runners: dict[str, Callable[[list[str]], int]] = {
        "config": _config,
        "serve": _serve,
        "perf": _perf,
        "tune": _tune,
        "backend": _backend,
    }
    try:
        if command in _CLIENT_COMMANDS:
            from triton_ort.cli.infer import main as client

            client([command, *rest], prog=PROG)
        elif command in runners:
            sys.exit(runners[command](rest))
        else:
            sys.exit(f"{PROG}: unknown command {command!r}; one of {', '.join(_HELP)}")
    except ModuleNotFoundError as error:
        # tritonclient (infer, config) and nvidia-pytriton (serve) are extras of the package
        sys.exit(
            f"{PROG} {command}: {error}; install the extras: pip install 'triton-ort[client,server,cpu]'"
        )
