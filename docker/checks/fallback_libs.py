"""Build helper: give the model process a pip copy of a CUDA library only where the image has none.

ORT's CUDA provider needs libnvrtc.so.12, which `import torch` does not load and triton_ort does not
preload. The 23.12 image is expected to provide it (docker/image-cuda-libs.txt, [PTB]); if its loader path
cannot find one, pip's copy (nvidia-cuda-nvrtc-cu12, a torch dependency) is symlinked into FALLBACK_DIR,
which the Dockerfile appends to the END of LD_LIBRARY_PATH. Either way nothing of the image is displaced:
the directory stays empty when the image has the library.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

# soname -> the nvidia/<package>/lib folder of the pip wheel that carries it
FALLBACK_LIBRARIES = {"libnvrtc.so.12": "cuda_nvrtc"}


def loader_finds(soname: str, skip: Path) -> str | None:
    """Where the dynamic loader would find `soname`: LD_LIBRARY_PATH, then ld.so.cache (skipping `skip`)."""
    for folder in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        if Path(folder).resolve() != skip.resolve() and (Path(folder) / soname).exists():
            return str(Path(folder) / soname)
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in cache.splitlines():
        parts = line.strip().split(" => ")
        if (
            len(parts) == 2
            and parts[0].split(" ")[0] == soname
            and "x86-64" in parts[0]
            and Path(parts[1]).exists()
        ):
            return parts[1]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir", type=Path, required=True, help="the fallback folder (last on LD_LIBRARY_PATH)"
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        import nvidia  # the namespace package of the nvidia-* wheels
    except ImportError:
        print("fallback_libs: no pip nvidia-* libraries (CPU stack): nothing to link")
        return 0

    for soname, package in FALLBACK_LIBRARIES.items():
        found = loader_finds(soname, args.dir)
        if found:
            print(f"fallback_libs: {soname}: the image provides {found}")
            continue
        candidates = [Path(p) / package / "lib" / soname for p in nvidia.__path__]
        source = next((c for c in candidates if c.exists()), None)
        if source is None:
            print(f"fallback_libs: {soname}: neither the image nor pip ({package}) has it", file=sys.stderr)
            return 1
        (args.dir / soname).unlink(missing_ok=True)
        (args.dir / soname).symlink_to(source)
        print(f"fallback_libs: {soname}: not in the image; linked pip's {source} into {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
