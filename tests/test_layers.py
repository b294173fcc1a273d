"""The layering rules, read from the source: imports point one way, nothing branches on a target's name."""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
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
            module = _absolute(node, package)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module ``from ... import`` reads, in ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


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


# -- the import graph of the project's packages -------------------------------------------

#: The packages whose imports the layer rules read.
PACKAGES = ("tuner", "search_spaces", "cost_models", "records")
#: The compiler core: expressions, the schedule language, lowering, code generation, the
#: knob spaces, the operator graph, targets and workloads. It imports only itself; all
#: else (build, model, task, tuning, search, measure, cli, search_spaces, cost_models,
#: records) builds on it.
CORE = (
    "tuner.te",
    "tuner.schedule",
    "tuner.lower",
    "tuner.codegen",
    "tuner.space",
    "tuner.graph",
    "tuner.target",
    "tuner.kinds",
    "tuner.workload",
)


@dataclass(frozen=True)
class ImportGraph:
    """Each module of the packages, the project modules it imports and the folder it is in.

    An import under ``if TYPE_CHECKING:`` is no edge; one inside a function
    (a lazy import) is. ``from pkg import sub`` is an edge to ``pkg.sub``
    where that is a module, else to ``pkg``.
    """

    imports: dict[str, frozenset[str]]
    folder: dict[str, str]


def import_graph(root: Path = ROOT, packages: Collection[str] = PACKAGES) -> ImportGraph:
    """The import graph of every module of ``packages`` (folders under ``root``)."""
    files: dict[str, Path] = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    folder = {m: ".".join(p.relative_to(root).parent.parts) for m, p in files.items()}
    imports = {m: frozenset(_edges(p, folder[m], files.keys()) - {m}) for m, p in files.items()}
    return ImportGraph(imports, folder)


def _edges(path: Path, package: str, modules: Collection[str]) -> set[str]:
    """The modules among ``modules`` that ``path`` (in ``package``) imports when it runs."""
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
            continue
        base = _absolute(node, package)
        found.update(
            f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
        )
    return {m for m in found if m in modules}


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, those in functions too, except under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _in(module: str, prefixes: Collection[str]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def _reachable(g: ImportGraph, start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others (itself if on a circle)."""
    seen: set[str] = set()
    queue = deque(g.imports[start])
    while queue:
        m = queue.popleft()
        if m not in seen:
            seen.add(m)
            queue.extend(g.imports[m])
    return seen


def circles(g: ImportGraph) -> list[set[str]]:
    """The strongly connected groups of modules: each imports every other, through some path."""
    reach = {m: _reachable(g, m) for m in g.imports}
    found: list[set[str]] = []
    for m in sorted(g.imports):
        if m in reach[m] and not any(m in c for c in found):
            found.append({n for n in reach[m] if m in reach[n]})
    return found


def _circle_path(g: ImportGraph, members: set[str]) -> str:
    """One way around ``members``, ``a -> b -> ... -> a`` (a shortest one from the first),
    and the members it does not pass through."""
    start = min(members)
    paths = {start: [start]}
    queue = deque([start])
    while queue:
        m = queue.popleft()
        for n in sorted(g.imports[m] & members):
            if n == start:
                others = sorted(members - set(paths[m]))
                return " -> ".join([*paths[m], start]) + (
                    f" (and in the same circle: {', '.join(others)})" if others else ""
                )
            if n not in paths:
                paths[n] = [*paths[m], n]
                queue.append(n)
    raise AssertionError(f"{sorted(members)} is no circle")


# -- the rules: each returns what breaks it, one line per offence ------------------------------


def circles_across_folders(g: ImportGraph) -> list[str]:
    """Circles whose modules sit in more than one folder (a circle inside a folder is allowed)."""
    out = []
    for c in circles(g):
        folders = sorted({g.folder[m] for m in c})
        if len(folders) > 1:
            out.append(f"across {', '.join(folders)}: {_circle_path(g, c)}")
    return out


def core_imports_above(g: ImportGraph) -> list[str]:
    """Imports from the compiler core (``CORE``) of anything that is not the core."""
    return [
        f"{m} imports {', '.join(sorted(bad))}"
        for m in sorted(g.imports)
        if _in(m, CORE) and (bad := {n for n in g.imports[m] if not _in(n, CORE)})
    ]


def schedule_imports_lower(g: ImportGraph) -> list[str]:
    """Imports from the schedule language (``tuner.schedule``) of lowering (``tuner.lower``)."""
    return [
        f"{m} imports {', '.join(sorted(bad))}"
        for m in sorted(g.imports)
        if _in(m, ["tuner.schedule"])
        and (bad := {n for n in g.imports[m] if _in(n, ["tuner.lower"])})
    ]


def _is_operator_module(m: str) -> bool:
    package, _, name = m.rpartition(".")
    return package == "search_spaces" and not name.startswith("_")


def gpu_schedules_import_operators(g: ImportGraph) -> list[str]:
    """Imports from the GPU schedules (``search_spaces._cuda``) of operator modules.

    The operator modules import their GPU schedules; what both need (parameters,
    definitions) lives in the shared private modules (``_conv_define``, ``_gemm`` ...).
    """
    return [
        f"{m} imports {', '.join(sorted(bad))}"
        for m in sorted(g.imports)
        if _in(m, ["search_spaces._cuda"])
        and (bad := {n for n in g.imports[m] if _is_operator_module(n)})
    ]


@functools.cache
def _project() -> ImportGraph:
    return import_graph()


def test_no_import_circle_spans_two_folders() -> None:
    bad = circles_across_folders(_project())
    assert not bad, "import circles across folders:\n" + "\n".join(bad)


def test_the_compiler_core_imports_only_the_core() -> None:
    bad = core_imports_above(_project())
    assert not bad, "the compiler core imports the layers above it:\n" + "\n".join(bad)


def test_the_schedule_imports_nothing_of_lowering() -> None:
    bad = schedule_imports_lower(_project())
    assert not bad, "the schedule language imports lowering:\n" + "\n".join(bad)


def test_gpu_schedules_import_no_operator_module() -> None:
    bad = gpu_schedules_import_operators(_project())
    assert not bad, "GPU schedules import operator modules:\n" + "\n".join(bad)


def test_the_graph_reads_every_package() -> None:
    """The rules above read the real project (an empty graph would pass them all)."""
    g = _project()
    assert {"tuner.schedule.state", "search_spaces._cuda.rows", "records", "cost_models"} <= set(
        g.imports
    )
    assert "tuner.schedule.state" in g.imports["tuner.lower.lower"]


#: A planted project: each rule has one offence, and the readers' edge cases are there.
PLANTED = {
    "tuner/__init__.py": "",
    "tuner/tune.py": "",
    # from pkg import sub: an edge to tuner.tune (above the core), none to tuner
    "tuner/target.py": "from tuner import tune\n",
    # an import only for type checking is no edge
    "tuner/te/__init__.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..tune import T\n"
    ),
    "tuner/schedule/__init__.py": "",
    # a lazy import is an edge: the schedule imports lowering, in a circle with it
    "tuner/schedule/state.py": "def check():\n    from ..lower import intrin\n",
    "tuner/lower/__init__.py": "",
    "tuner/lower/intrin.py": "from ..schedule.state import check\n",
    "search_spaces/__init__.py": "",
    "search_spaces/conv2d.py": "from ._cuda import conv2d\n",
    "search_spaces/_epilogue.py": "",
    "search_spaces/_cuda/__init__.py": "",
    # a shared private module is fine, the operator's module is not (and closes a circle)
    "search_spaces/_cuda/conv2d.py": "from .. import _epilogue\nfrom ..conv2d import stages\n",
    # a circle inside one folder is allowed
    "records/__init__.py": "",
    "records/a.py": "from . import b\n",
    "records/b.py": "from .a import x\n",
}


def test_the_layer_rules_flag_a_planted_project(tmp_path: Path) -> None:
    """The rules are not vacuous: each flags its planted offence, and nothing else."""
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    g = import_graph(tmp_path)
    assert g.imports["tuner.target"] == {"tuner.tune"}
    assert g.imports["tuner.te"] == set()
    assert g.folder["tuner.te"] == "tuner.te" and g.folder["tuner.target"] == "tuner"
    assert circles_across_folders(g) == [
        "across search_spaces, search_spaces._cuda: "
        "search_spaces._cuda.conv2d -> search_spaces.conv2d -> search_spaces._cuda.conv2d",
        "across tuner.lower, tuner.schedule: "
        "tuner.lower.intrin -> tuner.schedule.state -> tuner.lower.intrin",
    ]
    assert {"records.a", "records.b"} in circles(g)
    assert core_imports_above(g) == ["tuner.target imports tuner.tune"]
    assert schedule_imports_lower(g) == ["tuner.schedule.state imports tuner.lower.intrin"]
    assert gpu_schedules_import_operators(g) == [
        "search_spaces._cuda.conv2d imports search_spaces.conv2d"
    ]
