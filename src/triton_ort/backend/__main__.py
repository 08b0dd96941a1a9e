"""python -m triton_ort.backend install --backend-directory /opt/tritonserver/backends"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import BACKEND_NAME, install


def main(argv: list[str] | None = None, prog: str = "python -m triton_ort.backend") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Install the Python-based Triton backend {BACKEND_NAME!r} (one model.py).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    install_command = commands.add_parser("install", help=f"write DIR/{BACKEND_NAME}/model.py")
    install_command.add_argument(
        "--backend-directory",
        type=Path,
        required=True,
        help="tritonserver's --backend-directory (the images': /opt/tritonserver/backends)",
    )
    args = parser.parse_args(argv)
    if not args.backend_directory.is_dir():
        # A typo or a host without Triton: creating the folder would only hide it until a model fails to load.
        parser.exit(
            2,
            f"{parser.prog}: error: {args.backend_directory} does not exist; give tritonserver's "
            "--backend-directory (Triton's images: /opt/tritonserver/backends)\n",
        )
    if not (args.backend_directory / "python").is_dir():
        # Triton refuses a Python-based backend without the python backend; say so now, not at model load.
        print(
            f"warning: {args.backend_directory / 'python'} does not exist; {BACKEND_NAME} runs on the python "
            "backend, which tritonserver looks for there",
            file=sys.stderr,
        )
    print(install(args.backend_directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
