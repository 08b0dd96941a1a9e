"""The argument helpers every command shares: the default addresses, the one-line parser and error text,
and the argparse checks."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


def one_line(error: BaseException | str) -> str:
    """tritonclient's, gRPC's and perf_analyzer's messages can span lines; a CLI error is one."""
    text = " ".join(str(error).split())
    return text or (type(error).__name__ if isinstance(error, BaseException) else "")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (the usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see --help\n")


def positive(kind: type, what: str) -> Any:
    """An argparse type: a number of `kind` above 0, else an error that says `what` is expected."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number ({what})") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
        return value

    return parse


positive_int = positive(int, "1 or more")


def host_port(text: str) -> str:
    """--url: host:port, checked here. tritonclient's own refusal of a scheme ends in a traceback from its
    destructor, and gRPC wraps a port above 65535 silently (99999 dialled 34463)."""
    if "://" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give host:port without the scheme, such as {text.split('://', 1)[1].rstrip('/')!r}"
        )
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not host:port, such as 127.0.0.1:8000")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: port {port!r} is not a number from 1 to 65535")
    return text
