"""The layering rules, read from the source: imports point one way, nothing branches on a target's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Target-neutral layers: expressions, schedules, the IR, lowering and its printer.
NEUTRAL = ["tuner/te", "tuner/schedule", "tuner/lower", "tuner/kinds.py", "tuner/target.py"]
#: What a target-neutral module may not import.
BACKEND_MODULES = ("tuner.codegen", "numba", "llvmlite")
TARGET_NAMES = {"cpu", "cuda", "gpu"}


def _modules(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = ROOT / p
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def _imports(path: Path, package: str | None = None) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("path", _modules(NEUTRAL), ids=lambda p: str(p.relative_to(ROOT)))
def test_target_neutral_modules_import_no_backend(path: Path) -> None:
    bad = sorted(n for n in _imports(path) if n.startswith(BACKEND_MODULES))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def _name_comparisons(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            for v in values:
                if isinstance(v, ast.Constant) and v.value in TARGET_NAMES:
                    found.append(f"{path}:{node.lineno}")
    return found


def test_nothing_compares_a_target_name() -> None:
    """Capabilities decide, not names: no ``== "cpu"`` anywhere in the framework or templates."""
    found = [hit for p in _modules(["tuner", "search_spaces"]) for hit in _name_comparisons(p)]
    assert not found, f"comparisons with a target's name at {found}"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The two checks above are not vacuous: they flag a planted import and comparison."""
    planted = tmp_path / "planted.py"
    planted.write_text("from ..codegen import build\nif target.kind == 'cpu':\n    pass\n")
    assert any(n.startswith("tuner.codegen") for n in _imports(planted, "tuner.lower"))
    assert _name_comparisons(planted)
