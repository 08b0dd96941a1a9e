"""Commands as the tests run them: `triton-ort` inside the test's process (its exit status and what it
printed, without a subprocess's seconds of imports; tests/integration/test_cli.py runs the installed command
in a subprocess instead), and the repository's own modules (`python -m client.bench ...`) in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import NamedTuple

import pytest

from tests.support.paths import ROOT
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


def python_module(
    module: str, *args: str, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` from the checkout's root, as a maintainer runs it; it must exit 0 (the
    assertion shows the end of what it printed on stderr)."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result
