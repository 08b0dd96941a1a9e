"""`triton-ort serve`: the local tritonserver in the foreground (triton_ort.harness.server), stopped on
SIGTERM, SIGINT and SIGHUP (a second signal kills at once), with the launcher's checks' and the server's own
reasons on a failed start."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path
from types import FrameType

from triton_ort.cli.args import positive
from triton_ort.harness.checks import PYTHON_BACKENDS, ServerStartError
from triton_ort.harness.server import (
    DEFAULT_PORTS,
    DEFAULT_STARTUP_TIMEOUT_S,
    EXIT_TIMEOUT_S,
    NGC_BACKEND_DIRECTORY,
    STARTUP_TIMEOUT_ENV,
    LocalTritonServer,
    kill_group,
)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _StopRequested(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _request_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested(signum)


def _startup_timeout_default() -> float:
    text = os.environ.get(STARTUP_TIMEOUT_ENV, "")
    try:
        return float(text) if text else DEFAULT_STARTUP_TIMEOUT_S
    except ValueError:
        raise SystemExit(f"{STARTUP_TIMEOUT_ENV}={text!r} is not a number of seconds") from None


_positive_seconds = positive(float, "more than 0 seconds")


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default in --help, except where there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a model repository with the local tritonserver (on 127.0.0.1). More tritonserver "
        "arguments after --, e.g. `-- --exit-on-error=false` to serve the models that load when some fail.",
        formatter_class=_DefaultsHelp,
    )
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=Path(os.environ.get("MODEL_REPOSITORY", "model_repository")),
        help="the model repository (environment: MODEL_REPOSITORY)",
    )
    for service, port in DEFAULT_PORTS.items():
        parser.add_argument(
            f"--{service}-port", type=int, default=port, help=f"{service} port (0: a free one)"
        )
    parser.add_argument("--log-verbose", type=int, default=0, help="tritonserver's --log-verbose")
    parser.add_argument("--log-file", type=Path, help="keep the server log here (default: removed at stop)")
    parser.add_argument(
        "--startup-timeout",
        type=_positive_seconds,
        default=_startup_timeout_default(),
        metavar="SECONDS",
        help=f"how long loading the models may take (environment: {STARTUP_TIMEOUT_ENV})",
    )
    parser.add_argument(
        "--mps",
        action="store_true",
        help="run the server and its stubs as clients of a CUDA MPS daemon of their own (GPU hosts; "
        "docs/benchmarks.md: what it saves)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        type=_backend,
        default=[],
        metavar="NAME=DIR",
        help="serve this backend too: DIR holds libtriton_NAME.so (built for this tritonserver's release) or "
        f"a Python-based backend's model.py; NAME alone: {NGC_BACKEND_DIRECTORY}/NAME (NGC's images). "
        "Repeatable",
    )
    parser.add_argument("extra", nargs="*", help="more tritonserver arguments, after --")
    return parser


def _backend(text: str) -> tuple[str, Path]:
    """--backend NAME=DIR, or NAME for NGC's backend directory."""
    name, _, folder = text.partition("=")
    if name in PYTHON_BACKENDS:
        raise argparse.ArgumentTypeError(f"backend {name!r}: the launcher brings its own (for this Python)")
    if not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=DIR, e.g. onnxruntime=/opt/onnxruntime")
    path = Path(folder) if folder else NGC_BACKEND_DIRECTORY / name
    if not path.is_dir():
        where = f"{path} is not a folder" if folder else f"{path} does not exist here: give NAME=DIR"
        raise argparse.ArgumentTypeError(f"backend {name!r}: {where}")
    return name, path


def _report_start(server: LocalTritonServer) -> None:
    """What loaded and what did not, the failures first (the repository check's line where it found the
    cause, else the model's own load error), then the addresses."""
    checked = {_model_named(line) for line in server.check_problems}
    failed = [*server.check_problems]
    failed += [cause for cause in server.failed_models() if _model_named(cause) not in checked]
    for cause in failed:
        print(cause, file=sys.stderr, flush=True)
    if failed:
        print(
            f"{len(failed)} model(s) failed to load (above); serving the models that loaded "
            "(--exit-on-error=false)",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"tritonserver ready: HTTP {server.http_url}, gRPC {server.grpc_url}, metrics "
        f"127.0.0.1:{server.metrics_port}; pid {server.process.pid if server.process else '?'}; "
        f"log {server.log_path}\nCtrl-C stops it.",
        flush=True,
    )


def _model_named(line: str) -> str:
    """The model a failure line is about ("model 'NAME' version 1 failed...", "model 'NAME': ...")."""
    found = re.match(r"model '([^']*)'", line)
    return found[1] if found else line


def _how_it_ended(returncode: int) -> str:
    """One line on how tritonserver ended by itself: the signal that killed it (a crash: SIGSEGV, SIGABRT;
    the OOM killer: SIGKILL), or its exit code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"tritonserver died: killed by {name} (signal {-returncode})"
    return f"tritonserver exited by itself with code {returncode}"


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    args = build_parser(prog).parse_args(argv)
    server = LocalTritonServer(
        args.model_repository,
        args.http_port,
        args.grpc_port,
        args.metrics_port,
        args.extra,
        startup_timeout_s=args.startup_timeout,
        log_verbose=args.log_verbose,
        log_file=args.log_file,
        backends=dict(args.backend),
        mps=args.mps,
    )
    for signum in STOP_SIGNALS:
        signal.signal(signum, _request_stop)
    code = 0
    try:
        server.start()
        _report_start(server)
        assert server.process is not None
        code = server.process.wait()
        print(f"{_how_it_ended(code)}; its log ends:", file=sys.stderr)
        print("\n".join(server.log().splitlines()[-20:]), file=sys.stderr)
        # as a shell reports a process a signal ended (128 + its number), so a supervisor restarts it
        code = 128 - code if code < 0 else code or 1
    except _StopRequested as stop:
        print(f"{stop}: stopping tritonserver (at most {EXIT_TIMEOUT_S} s of draining) ...", flush=True)
    except ServerStartError as error:
        print(error, file=sys.stderr)
        code = 1
    finally:
        for signum in STOP_SIGNALS:  # a second signal while stopping: kill at once
            # Only the signal, no wait: the main thread may hold Popen's wait lock inside stop().
            signal.signal(signum, lambda signum, frame: kill_group(server.process))
        server.stop(timeout_s=EXIT_TIMEOUT_S + 20)
    sys.exit(code)


if __name__ == "__main__":
    main()
