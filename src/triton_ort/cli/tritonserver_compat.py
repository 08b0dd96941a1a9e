"""`triton-ort-tritonserver`: tritonserver's own command line, served by `triton-ort serve`.

For tools that start a `tritonserver` binary themselves, above all Model Analyzer's local launch mode
(`triton_server_path: triton-ort-tritonserver`, docs/serving-your-model.md "Model Analyzer"): the repository,
the ports and the log level become `triton-ort serve`'s options (which bring the python backend, this
backend and the stub's environment), and every other tritonserver option goes to tritonserver as it came.
Options come as `--name=value` or, as Model Analyzer writes them, `--name value`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# tritonserver's option -> `triton-ort serve`'s
SERVE_OPTIONS = {
    "--model-repository": "--model-repository",
    "--model-store": "--model-repository",  # tritonserver's older name for it
    "--http-port": "--http-port",
    "--grpc-port": "--grpc-port",
    "--metrics-port": "--metrics-port",
    "--log-verbose": "--log-verbose",
}
# Values Model Analyzer writes for a flag (`--log-verbose True`), and tritonserver's own words for them.
LOG_VERBOSE = {"true": "1", "false": "0"}


class UsageError(ValueError):
    """A command line this entry point cannot serve, said in one line."""


def _options(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """(name, value) pairs from `--name=value` and `--name value` words."""
    options: list[tuple[str, str | None]] = []
    words = list(argv)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            raise UsageError(f"{word!r}: tritonserver takes only options (--name=value or --name value)")
        name, equals, value = word.partition("=")
        if equals:
            options.append((name, value))
        else:
            options.append((name, words.pop(0) if words and not words[0].startswith("--") else None))
    return options


def serve_arguments(argv: Sequence[str]) -> list[str]:
    """`triton-ort serve`'s arguments for a tritonserver command line."""
    serve: list[str] = []
    passed_on: list[str] = []
    repositories = 0
    for name, value in _options(argv):
        if name not in SERVE_OPTIONS:
            passed_on.append(name if value is None else f"{name}={value}")
            continue
        if value is None:
            raise UsageError(f"{name} needs a value")
        if SERVE_OPTIONS[name] == "--model-repository":
            repositories += 1
            if repositories > 1:
                raise UsageError("more than one --model-repository: triton-ort serve serves one repository")
        if name == "--log-verbose":
            value = LOG_VERBOSE.get(value.lower(), value)
        serve += [SERVE_OPTIONS[name], value]
    if not repositories:
        raise UsageError("--model-repository is required (as tritonserver requires it)")
    return [*serve, "--", *passed_on] if passed_on else serve


def main(argv: Sequence[str] | None = None) -> None:
    from triton_ort.cli import serve

    try:
        arguments = serve_arguments(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        print(f"triton-ort-tritonserver: {error}", file=sys.stderr)
        sys.exit(2)
    serve.main(arguments, prog="triton-ort-tritonserver")


if __name__ == "__main__":
    main()
