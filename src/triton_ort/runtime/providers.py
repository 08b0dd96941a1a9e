"""The execution providers' libraries: loading CUDA's ahead of the CUDA EP, and saying why a provider a
session asked for did not load.

ORT quietly drops a provider it cannot load and runs on CPU; the first sign is then IO binding's
"There's no data transfer registered for copying tensors from Device:[DeviceType:1 ...]". create_session
checks the session's providers right after creating it and, when one is missing, raises ProviderError with
the diagnosis here: the cause and what to do.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort

from .distributions import listed, ort_distributions

LOGGER = logging.getLogger(__name__)

CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
TENSORRT_EP = "TensorrtExecutionProvider"
OPENVINO_EP = "OpenVINOExecutionProvider"


def preload_cuda_libraries() -> None:
    """Make CUDA/cuDNN libraries from the nvidia-* pip packages loadable before the CUDA EP needs them.

    ORT >= 1.21 has `preload_dlls()`. Older builds rely on the loader path; importing torch loads only part
    of cuDNN 9, so the rest of pip's cuDNN is loaded here explicitly (never put pip's CUDA folders on a
    server-wide LD_LIBRARY_PATH, which would displace the CUDA libraries of Triton's own backends).
    """
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        preload(cuda=True, cudnn=True, msvc=False)
        return
    try:
        import nvidia.cudnn
    except ImportError:
        return
    for path in nvidia.cudnn.__path__:
        for library in sorted(glob.glob(os.path.join(path, "lib", "libcudnn*.so*"))):
            try:
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            except OSError as error:
                LOGGER.warning("could not preload %s: %s", library, error)


_PROBE = """
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the provider needs its symbols (Provider_GetHost)
ctypes.CDLL(sys.argv[2])
"""


def _provider_load_error(provider: str = "cuda") -> str | None:
    """dlopen a provider library (cuda, tensorrt) to learn which dependency is missing, when the build has
    one.

    In a child process: on a host without a driver, the provider's start-up code can crash the process
    that loads it, and this must never take the model (or the server's stub) down with it.
    """
    capi = Path(ort.__file__).parent / "capi"
    library = capi / f"libonnxruntime_providers_{provider}.so"
    if not library.exists():
        return None
    # Inside Triton's stub the interpreter is embedded, so sys.executable need not be a Python at all.
    python = sys.executable if Path(sys.executable).name.startswith("python") else shutil.which("python3")
    if python is None:
        return None
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE, str(capi / "libonnxruntime_providers_shared.so"), str(library)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"could not probe {library.name}: {error}"
    if probe.returncode == 0:
        return None
    lines = [line for line in probe.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"loading {library.name} killed the probe (exit {probe.returncode})"


def diagnose_missing_cuda_provider(ep_error: str = "") -> str:
    """Why a session asked for CUDA but has none, and the fix, in words a user can act on. `ep_error`:
    the error ORT gave when it dropped the provider, if it gave one."""
    distributions = ort_distributions()
    available = ort.get_available_providers()
    lines = [
        "CUDA was requested (GPU instance) but the ONNX Runtime session has no CUDAExecutionProvider; "
        "binding device memory would fail with ORT's \"There's no data transfer registered for copying "
        'tensors from Device:[DeviceType:1 ...]".',
        f"  onnxruntime module: {ort.__file__} (version {ort.__version__}, get_device()={ort.get_device()})",
        f"  installed distributions: {listed(distributions)}",
        f"  available providers: {available}",
    ]
    if "onnxruntime" in distributions and "onnxruntime-gpu" in distributions:
        lines.append(
            "  cause: both onnxruntime (CPU) and onnxruntime-gpu are installed; they share the module "
            "'onnxruntime' and the CPU one shadows the GPU one. Fix: pip uninstall -y onnxruntime "
            "onnxruntime-gpu && pip install onnxruntime-gpu==<the version built for your CUDA>"
        )
    elif CUDA_EP not in available:
        lines.append(
            "  cause: this onnxruntime build has no CUDA provider. Fix: install onnxruntime-gpu (built for "
            "your CUDA major version) instead of onnxruntime"
        )
    elif ep_error:
        lines.append(
            f"  cause: ONNX Runtime could not start the CUDA provider: {ep_error}. Fix: if it names an "
            "option, check the 'cuda' accelerator's parameters against this onnxruntime version; if it names "
            "a library, make it loadable (see docs/docker.md)"
        )
    else:
        load_error = _provider_load_error("cuda")
        lines.append(
            "  cause: the CUDA provider is built in but failed to load"
            + (
                f": {load_error}"
                if load_error
                else " (see ORT's log above for the library it could not load)"
            )
            + ". Fix: make that CUDA/cuDNN library loadable (the onnxruntime-gpu build must match the "
            "CUDA and cuDNN major versions present; see docs/docker.md)"
        )
    lines.append('  To run on CPU instead, set parameter allow_cpu_fallback: "true" or use KIND_CPU.')
    return "\n".join(lines)


def diagnose_missing_tensorrt_provider() -> str:
    """Why a session asked for TensorRT but has none, and the fix."""
    available = ort.get_available_providers()
    lines = [
        "the tensorrt execution accelerator was requested (optimization.execution_accelerators."
        "gpu_execution_accelerator) but the ONNX Runtime session has no TensorrtExecutionProvider.",
        f"  onnxruntime module: {ort.__file__} (version {ort.__version__})",
        f"  available providers: {available}",
    ]
    if TENSORRT_EP not in available:
        lines.append(
            "  cause: this onnxruntime build has no TensorRT provider. Fix: install an onnxruntime-gpu "
            "build with TensorRT (the PyPI onnxruntime-gpu wheels have it)"
        )
    else:
        load_error = _provider_load_error("tensorrt")
        lines.append(
            "  cause: the TensorRT provider is built in but failed to load"
            + (
                f": {load_error}"
                if load_error
                else " (see ORT's log above for the library it could not load)"
            )
            + ". Fix: install the TensorRT libraries this onnxruntime was built against (libnvinfer, e.g. "
            "pip install tensorrt-cu12-libs of the matching major version) and make them loadable"
        )
    lines.append('  To run on the CUDA EP instead, set parameter allow_cuda_fallback: "true".')
    return "\n".join(lines)
