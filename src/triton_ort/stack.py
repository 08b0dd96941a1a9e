"""Is this Python's torch + ONNX Runtime stack able to serve? `make venv`, `make run` and `make test` ask
it before anything starts, and stop with one line naming the cause and the fix.

    python -m triton_ort.stack --expect cuda    # GPU hosts: onnxruntime-gpu whose CUDA EP really loads
    python -m triton_ort.stack --expect cpu     # CPU hosts
"""

from __future__ import annotations

import argparse
import importlib.metadata
import mmap
import re
import sys
from pathlib import Path

from .runtime.distributions import listed, ort_distributions


class StackError(Exception):
    """One line: the cause, then 'Fix: ...'."""


def _major_from_requirements(requirements: list[str], package: str) -> int | None:
    """13 from 'nvidia-cuda-runtime~=13.0; extra == "cuda"', 12 from 'nvidia-cuda-runtime-cu12~=12.0 ...'."""
    for requirement in requirements:
        match = re.match(rf"{package}(-cu(\d+))?\s*~=\s*(\d+)", requirement)
        if match:
            return int(match.group(3))
    return None


def _major_from_provider(provider: Path, soname: str) -> int | None:
    """The major version of `soname` (libcudart.so.N) that the provider library links."""
    if not provider.is_file():
        return None
    with open(provider, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        match = re.search(re.escape(soname.encode()) + rb"\.(\d+)\x00", data)
    return int(match.group(1)) if match else None


def ort_cuda_majors(module_dir: Path) -> tuple[int | None, int | None]:
    """(CUDA major, cuDNN major) the installed onnxruntime-gpu is built for."""
    try:
        requirements = importlib.metadata.requires("onnxruntime-gpu") or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    provider = module_dir / "capi" / "libonnxruntime_providers_cuda.so"
    cuda = _major_from_requirements(requirements, "nvidia-cuda-runtime")
    cudnn = _major_from_requirements(requirements, "nvidia-cudnn")
    return (
        cuda if cuda is not None else _major_from_provider(provider, "libcudart.so"),
        cudnn if cudnn is not None else _major_from_provider(provider, "libcudnn.so"),
    )


def check_distributions(expect: str) -> None:
    owners = ort_distributions()
    shown = listed(owners)
    if not owners:
        raise StackError(
            f"no ONNX Runtime is installed. Fix: pip install onnxruntime{'-gpu' * (expect == 'cuda')}"
        )
    if len(owners) > 1:
        raise StackError(
            f"{shown} are all installed; they share the module 'onnxruntime' and shadow each other. Fix: "
            "pip uninstall -y " + " ".join(sorted(owners)) + f" && pip install {sorted(owners)[-1]}"
        )
    if expect == "cuda" and "onnxruntime-gpu" not in owners:
        raise StackError(
            f"this is a GPU host but {shown} is a CPU build. Fix: pip uninstall -y {shown.split('==')[0]} "
            "&& pip install onnxruntime-gpu (make venv does this from requirements-cuda.txt)"
        )


def check_cuda() -> str:
    """torch and onnxruntime-gpu agree on CUDA and cuDNN, the GPU is usable, and a CUDA-EP session loads."""
    import onnxruntime as ort
    import torch  # first, as in the model: its libraries are the ones ORT's provider binds to

    if torch.version.cuda is None:
        raise StackError(
            f"torch {torch.__version__} is a CPU build. Fix: install PyPI's default Linux torch wheel "
            "(a CUDA build) from a package index, not a local CPU wheel"
        )
    torch_cuda = int(torch.version.cuda.split(".")[0])
    ort_cuda, ort_cudnn = ort_cuda_majors(Path(ort.__file__).parent)
    if ort_cuda is not None and ort_cuda != torch_cuda:
        raise StackError(
            f"torch {torch.__version__} is built for CUDA {torch.version.cuda} but onnxruntime-gpu "
            f"{ort.__version__} for CUDA {ort_cuda}. Fix: an onnxruntime-gpu built for CUDA {torch_cuda} "
            "(requirements-cuda.txt pins matching pairs)"
        )
    if not torch.cuda.is_available():
        raise StackError(
            "torch cannot use a GPU (torch.cuda.is_available() is False). Fix: check the NVIDIA driver "
            f"(nvidia-smi) supports CUDA {torch.version.cuda}, or run on a CPU host"
        )
    cudnn_version: int | None = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    # cuDNN 9 encodes 9.1.2 as 90102, cuDNN 8 encoded 8.9.7 as 8907
    torch_cudnn = (cudnn_version // (10000 if cudnn_version >= 10000 else 1000)) if cudnn_version else None
    if ort_cudnn is not None and torch_cudnn is not None and ort_cudnn != torch_cudnn:
        raise StackError(
            f"torch uses cuDNN {torch_cudnn} but onnxruntime-gpu {ort.__version__} needs cuDNN {ort_cudnn}. "
            "Fix: a matching pair (requirements-cuda.txt)"
        )
    from .runtime.providers import CUDA_EP, diagnose_missing_cuda_provider, preload_cuda_libraries

    preload_cuda_libraries()
    session = ort.InferenceSession(_identity_model(), providers=[CUDA_EP, "CPUExecutionProvider"])
    if CUDA_EP not in session.get_providers():
        cause = diagnose_missing_cuda_provider().splitlines()[-2].strip()
        raise StackError(f"ONNX Runtime's CUDA EP does not load: {cause}")
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch_cudnn}), onnxruntime-gpu "
        f"{ort.__version__} (CUDA {ort_cuda}, cuDNN {ort_cudnn}): CUDA EP loads on "
        f"{torch.cuda.get_device_name(0)}"
    )


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    from .model.onnx_files import model_bytes

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "stack_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return model_bytes(graph)


def check(expect: str) -> str:
    """A one-line description of a working stack; StackError with the cause and the fix otherwise."""
    check_distributions(expect)
    if expect == "cuda":
        return check_cuda()
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__} ({ort.get_device()}), providers {ort.get_available_providers()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--expect", choices=["cpu", "cuda"], required=True)
    args = parser.parse_args(argv)
    try:
        summary = check(args.expect)
    except StackError as error:
        print(f"make: the {args.expect} stack of {sys.executable} cannot serve: {error}", file=sys.stderr)
        return 1
    print(f"stack ({args.expect}): {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
