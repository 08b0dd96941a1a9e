"""The package's layout (docs/ARCHITECTURE.md): its folders are its parts, and imports run one way.

Read from the source (every import statement, those inside functions too), so a lazy import cannot hide a
cycle or an import that runs back up."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "src" / "triton_ort"
TOP_LEVEL_MODULES_AT_MOST = 10
# What each part may import of the others (besides itself and the top-level errors module): the model's
# description and the hooks' contract sit below the runtime, the runtime below the backend, and the
# command line and the harness beside them, never inside the runtime.
MAY_IMPORT = {
    "model": set(),
    "hooks": {"model"},
    "runtime": {"model", "hooks"},
    "backend": {"runtime", "model", "package"},
    "harness": {"model", "backend"},
    "cli": {"model", "hooks", "harness", "backend"},
    "stack": {"model", "runtime"},
    "package": {"runtime", "model", "hooks"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """The triton_ort modules a file imports (a `from X import name` names X.name where that is a module)."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("triton_ort"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if not target.startswith("triton_ort"):
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                yield candidate if _is_module(candidate) else target


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        graph[module] = {name for name in _imports(path) if name != module and _is_module(name)}
    return graph


def _part(module: str) -> str:
    """'runtime', 'model', ... for a subpackage's module; the module's own name for a top-level one."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return parts[1]


def test_the_package_has_at_most_ten_top_level_modules() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= TOP_LEVEL_MODULES_AT_MOST, modules


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = _graph()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(target) :], target]))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_each_part_imports_only_the_parts_below_it() -> None:
    wrong = []
    for module, targets in sorted(_graph().items()):
        part = _part(module)
        allowed = MAY_IMPORT.get(part, set()) | {part, "errors"}
        wrong += [f"{module} -> {target}" for target in sorted(targets) if _part(target) not in allowed]
    assert wrong == []
