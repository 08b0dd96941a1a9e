"""The tests' own layout: what several tests share lives in tests/support/ (or in a tier's own support
module or conftest.py), never in a test module that another tier then imports: a test module is free to
change with its tests."""

from __future__ import annotations

from tests.support.imports import imported_modules
from tests.support.paths import ROOT


def test_no_test_module_imports_another_test_module() -> None:
    test_modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(test_modules) > 50
    for path in test_modules:
        wrong = {m for m in imported_modules(path) if m.startswith("tests.") and ".test_" in m}
        assert not wrong, f"{path.relative_to(ROOT)} imports the test module(s) {sorted(wrong)}"
