"""The benchmark and the diagnostics as laid out: the benchmark repository that
scripts/build_models.py --bench writes holds every model client.bench serves, each through a model.py that
exists (ours, or an anchor of client/anchors/) but the native backend's twin; client/ never imports
diagnostics/, and the diagnostics import nothing from each other or from scripts/ (what they share is
client/bench_common.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from tests.support.imports import imported_modules
from tests.support.paths import ROOT


def build_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_models", ROOT / "scripts" / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def served_suffixes() -> set[str]:
    """Every served-name suffix client/bench.py names: `f"{model}_x"`, `model + "_x"` and the anchors'
    `"_x": (...)` tables."""
    source = (ROOT / "client" / "bench.py").read_text()
    found = set(re.findall(r'f"\{model\}(_[a-z0-9_]+)"', source))
    found |= set(re.findall(r'"(_[a-z0-9_]+)": \(', source))
    found |= set(re.findall(r'"(_[a-z0-9_]+)"[,\]]', source))
    return found


@pytest.mark.parametrize("model", ["demo", "mlp1024", "mlp4096"])
def test_every_model_the_benchmark_serves_is_built_from_a_model_py_that_exists(model: str) -> None:
    module = build_models()
    variants = module.bench_variants(model)
    suffixes = served_suffixes()
    assert {"_naive", "_plain", "_null_host", "_null_device", "_null_kernel", "_graph"} <= suffixes
    # _pytriton is served by PyTriton, _tuned written by the sweep itself from tune's config (--tuned)
    built_elsewhere = ("_pytriton", "_tuned")
    missing = sorted(model + s for s in suffixes if model + s not in variants and s not in built_elsewhere)
    assert missing == [], "client.bench serves these, scripts/build_models.py --bench does not build them"
    for name, serving in variants.items():
        if serving.backend == "python":
            assert serving.model_py is not None and serving.model_py.is_file(), f"{name}: {serving.model_py}"
        else:  # a backend that reads model.onnx itself: Triton's native onnxruntime (by instance count too)
            assert re.fullmatch(rf"{model}_native(_i\d+)?", name), name
            assert (serving.backend, serving.model_py) == ("onnxruntime", None)


def test_client_and_the_diagnostics_import_along_the_layout() -> None:
    for path in sorted((ROOT / "client").rglob("*.py")):
        wrong = {m for m in imported_modules(path) if m.split(".")[0] in ("diagnostics", "scripts")}
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"
    diagnostics = sorted((ROOT / "diagnostics").glob("*.py"))
    assert len(diagnostics) > 1
    for path in diagnostics:
        wrong = {m for m in imported_modules(path) if m.split(".")[0] in ("diagnostics", "scripts")}
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"
