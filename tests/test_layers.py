"""The house's layering holds (issue 25): each layer imports only the layers below it, no module is in an
import cycle, no private name crosses modules, and nothing below assets/ and resources/ imports them.

The layer order is the import-linter contract in ``pyproject.toml`` (``make lint`` runs it too); the other
checks read the same import graph (grimp, imports inside functions counted) or the source.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pgrag_dag"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path, env_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(Path(sys.executable).parent), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if env_path is not None:
        env["PYTHONPATH"] = str(env_path)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(cwd / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_layer_contracts_hold() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_an_upward_import_breaks_the_layer_contract(tmp_path: Path) -> None:
    copy = tmp_path / "pgrag_dag"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "templates"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    db = copy / "store" / "db.py"
    db.write_text(
        db.read_text(encoding="utf-8") + "\n\ndef _upward() -> None:\n"
        "    from pgrag_dag.query import run  # noqa: F401\n",
        encoding="utf-8",
    )
    done = _lint_imports(tmp_path, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the engine's layers BROKEN" in done.stdout
    assert "pgrag_dag.store.db -> pgrag_dag.query.run" in done.stdout


def test_no_module_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("pgrag_dag", cache_dir=None)
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules)))
    for module in modules:
        if module not in index:
            visit(module)
    assert cycles == []


def _imports(path: Path) -> list[ast.ImportFrom]:
    return [
        n
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("pgrag_dag")
    ]


def test_no_private_name_is_imported_across_modules() -> None:
    crossing = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.module}.{a.name}"
        for base in ("pgrag_dag", "assets", "resources")
        for p in _sources(ROOT / base)
        for n in _imports(p)
        for a in n.names
        if a.name.startswith("_")
    ]
    assert crossing == []


def test_nothing_below_assets_and_resources_imports_them() -> None:
    top = {"pgrag_dag.assets", "pgrag_dag.resources"}
    allowed = (PACKAGE / "cli",)
    upward = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.module}"
        for p in _sources(PACKAGE)
        if not p.is_relative_to(allowed[0])
        for n in _imports(p)
        if n.module in top or any(n.module.startswith(t + ".") for t in top)
    ]
    assert upward == []
    resources = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.module}"
        for p in _sources(ROOT / "resources")
        for n in _imports(p)
        if n.module.startswith("pgrag_dag.assets")
    ]
    assert resources == []  # assets use resources, never the other way round


def test_the_readme_layout_and_the_store_map_name_every_module() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[a-z_][a-z_0-9]*", layout))  # module names may hold digits (onnx_int8)
    modules = {p.stem for p in _sources(PACKAGE) if p.stem != "__init__"}
    packages = {p.parent.name for p in _sources(PACKAGE) if p.stem == "__init__" and p.parent != PACKAGE}
    assert sorted((modules | packages) - words) == []
    store_map = (PACKAGE / "store" / "__init__.py").read_text(encoding="utf-8")
    listed = set(re.findall(r":mod:`\.(\w+)`", store_map))
    assert listed == {p.stem for p in (PACKAGE / "store").glob("*.py") if p.stem != "__init__"}
