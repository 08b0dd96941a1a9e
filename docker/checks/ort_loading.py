"""Which ONNX Runtime libraries a process really loads, after `import onnxruntime` and a CUDA-EP session.

onnxruntime-gpu dlopen()s libonnxruntime_providers_shared.so and libonnxruntime_providers_cuda.so by bare
name. The loader searches LD_LIBRARY_PATH before the RUNPATH ($ORIGIN) of ORT's Python extension, so a
folder of another ORT build on LD_LIBRARY_PATH (Triton's /opt/tritonserver/backends/onnxruntime, ORT
1.16.3) wins. Every libonnxruntime* file a process loads must lie in the imported package's
onnxruntime/capi.

The probe runs in a child process, with the environment under test, and reports two views:
- `mapped`: the libonnxruntime* files in the child's /proc/self/maps after the session attempt;
- `opened`: the libonnxruntime* paths the dynamic loader reports (LD_DEBUG=files), including files that it
  opened and unloaded again because a dependency was missing, and those it was initialising when a
  driverless machine crashed the child (the provider's start-up code can, during `docker build`).

Used by image_selfcheck.py (inside the image, with the entrypoint's environment) and by
tests/docker/test_library_path.py (on CI, with provider libraries of another ORT build).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The child: import onnxruntime, try a CUDA-EP session on a one-node model, print what is mapped.
PROBE = r"""
import json, sys
import onnxruntime as ort
from onnx import TensorProto, helper

# Said at once: the session attempt below may crash a driverless process inside the provider's start-up.
print(json.dumps({"module": ort.__file__, "version": ort.__version__}), flush=True)

graph = helper.make_graph(
    [helper.make_node("Identity", ["x"], ["y"])], "probe",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 7
error = None
providers = []
try:
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    providers = session.get_providers()
except Exception as exc:  # no GPU: the CUDA EP fails to load, which is expected here
    error = f"{type(exc).__name__}: {exc}"
with open("/proc/self/maps") as maps:
    mapped = sorted({line.split(None, 5)[5].strip() for line in maps if "libonnxruntime" in line
                     and len(line.split(None, 5)) == 6})
print(json.dumps({"providers": providers, "error": error, "mapped": mapped}))
"""

_LOADER_PATH = re.compile(r"(/[^\s\[\]]*/libonnxruntime[^\s/\[\]]*)")


@dataclass
class ProbeResult:
    returncode: int
    capi: Path | None = None
    version: str = ""
    providers: list[str] = field(default_factory=list)
    mapped: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    output: str = ""

    @property
    def foreign(self) -> list[str]:
        """Loaded libonnxruntime* files that are not the imported package's own."""
        return foreign_ort_files([*self.mapped, *self.opened], self.capi)


def foreign_ort_files(paths: list[str], capi: Path | None) -> list[str]:
    """The libonnxruntime* paths outside `capi` (all of them when the package was not even imported)."""
    outside = set()
    for path in paths:
        resolved = Path(os.path.realpath(path))
        if not resolved.name.startswith("libonnxruntime"):
            continue
        if capi is None or resolved.parent != capi:
            outside.add(str(resolved))
    return sorted(outside)


def loader_opened(ld_debug_text: str) -> list[str]:
    """Absolute libonnxruntime* paths in LD_DEBUG=files output (loaded, initialised or unloaded)."""
    return sorted(set(_LOADER_PATH.findall(ld_debug_text)))


def probe(env: Mapping[str, str], python: str = sys.executable, timeout_s: float = 300) -> ProbeResult:
    """Run the probe in a child with exactly `env` (plus LD_DEBUG, to see what the loader opens)."""
    with tempfile.TemporaryDirectory(prefix="ort-probe-") as scratch:
        child_env = dict(env)
        child_env["LD_DEBUG"] = "files"
        child_env["LD_DEBUG_OUTPUT"] = str(Path(scratch) / "ld")
        result = subprocess.run(
            [python, "-c", PROBE],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        ld_debug = "".join(p.read_text(errors="replace") for p in Path(scratch).glob("ld*"))
    outcome = ProbeResult(result.returncode, output=(result.stdout + result.stderr)[-4000:])
    outcome.opened = loader_opened(ld_debug)
    report: dict[str, Any] = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            report.update(json.loads(line))
    if "module" in report:
        outcome.capi = Path(os.path.realpath(report["module"])).parent / "capi"
        outcome.version = report["version"]
    outcome.providers = report.get("providers", [])
    outcome.mapped = report.get("mapped", [])
    return outcome


# Stands in for tritonserver: the entrypoint execs it, and it records the environment it was given.
_FAKE_TRITONSERVER = """#!/bin/sh
env -0 > "$TRITON_ORT_ENV_DUMP"
"""


def entrypoint_environment(
    entrypoint: Path, env: Mapping[str, str], model_repository: Path
) -> dict[str, str]:
    """The environment `entrypoint` starts tritonserver with, given `env`: it runs the real script with a
    stand-in `tritonserver` first on PATH. Works for any entrypoint that ends in `exec tritonserver`."""
    with tempfile.TemporaryDirectory(prefix="fake-tritonserver-") as scratch:
        fake = Path(scratch) / "tritonserver"
        fake.write_text(_FAKE_TRITONSERVER)
        fake.chmod(0o755)
        dump = Path(scratch) / "env"
        run_env = dict(env)
        run_env["PATH"] = f"{scratch}:{env.get('PATH', os.defpath)}"
        run_env["TRITON_ORT_ENV_DUMP"] = str(dump)
        run_env["TRITON_MODEL_REPOSITORY"] = str(model_repository)
        result = subprocess.run(
            ["bash", str(entrypoint)], env=run_env, capture_output=True, text=True, timeout=60, check=False
        )
        if result.returncode != 0 or not dump.is_file():
            raise RuntimeError(
                f"{entrypoint} did not reach `exec tritonserver` (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        started = dict(item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
    started.pop("TRITON_ORT_ENV_DUMP", None)
    started["PATH"] = env.get("PATH", os.defpath)
    return started


def describe(result: ProbeResult) -> str:
    return (
        f"onnxruntime {result.version or '?'} from {result.capi or '?'}, exit {result.returncode}; "
        f"mapped {result.mapped}; opened by the loader {result.opened}"
    )
