"""`triton-ort` run inside the test's process: its exit status and what it printed, without a subprocess's
seconds of imports (tests/integration/test_cli.py runs the installed command in a subprocess instead)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from triton_ort.cli import main


class Done(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """`triton-ort ARGS` as the console script runs it, in this process."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    code = exited.value.code
    out, err = capsys.readouterr()
    if isinstance(code, str):  # sys.exit("message"): printed on stderr, status 1
        return Done(1, out, err + code + "\n")
    return Done(code or 0, out, err)
