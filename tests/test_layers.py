"""The layers of ``app/`` and no import cycles, read from the source (beside tests/test_boundaries.py's package rules).

``app/`` has five layers, top to bottom (docs/architecture.md, "The layers of app/"):

    cli         app.cli, app.__main__    parses the command line, dispatches to a command
    commands    app.commands             one module per sub-command, and what several of them share
    tui, bench, app.tui, app.bench,      the dashboard; the benchmarks; the server and load generator
    serve       app.serve                (peers: none imports another)
    workloads   app.workloads            the pool as an mlx-lm cache, engines, scenarios, worker processes
    models      app.models               model loading, the BLAS and MLX bootstrap

* A module imports from its own package or from a layer below, never from a layer above or a peer.
* No two modules of ``app/`` import each other, directly or through others (no cycle of any length).
* Nothing in the installed packages imports ``lab/`` (device and diagnosis scripts, above everything), and the
  packaging (pyproject's ``packages.find``) does not install it.

Every import counts: at module level or inside a function (a lazy import is a dependency all the same).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# module prefix -> (its group, its layer; 0 is the top): the longest matching prefix places a module
LAYERS = {"app.__main__": ("cli", 0), "app.cli": ("cli", 0), "app.commands": ("commands", 1), "app.tui": ("tui", 2),
          "app.bench": ("bench", 2), "app.serve": ("serve", 2), "app.workloads": ("workloads", 3), "app.models": ("models", 4),
          "app": ("app", 5)}
INSTALLED = ("app", "pool", "probes")


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root/package`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module ``target`` names (itself, else its nearest enclosing package), or None outside ``modules``."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module, line) for every import of one of ``modules`` in ``path``: ``from a.b import c`` counts as
    ``a.b.c`` when that is a module, else ``a.b``; relative imports are resolved against the module's package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        out += [(found, node.lineno) for target in targets
                if (found := _resolve(target, modules)) is not None and found != name]
    return out


def import_graph(root: Path, package: str = "app") -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    """(module -> the modules of ``package`` it imports, (importer, imported) -> a line of the import)."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    lines: dict[tuple[str, str], int] = {}
    for name, path in modules.items():
        for target, line in imports_of(name, path, modules):
            graph[name].add(target)
            lines.setdefault((name, target), line)
    return graph, lines


def layer_of(module: str) -> tuple[str, int]:
    """(the group a module belongs to, its layer)."""
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def layer_violations(graph: dict[str, set[str]], lines: dict[tuple[str, str], int]) -> list[str]:
    """Every import of a module in a layer above the importer's, or of a peer package in the same layer."""
    problems = []
    for importer, targets in sorted(graph.items()):
        home, level = layer_of(importer)
        for target in sorted(targets):
            package, target_level = layer_of(target)
            if package == home or target_level > level:
                continue
            how = "a layer above" if target_level < level else "a peer in its own layer"
            problems.append(f"{importer} (line {lines[importer, target]}) imports {target}, {how} "
                            f"({home} -> {package})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: every strongly connected set of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_app_module_imports_from_a_layer_above_it():
    problems = layer_violations(*import_graph(ROOT))
    assert problems == [], "\n".join(problems)


def test_no_two_app_modules_import_each_other():
    found = cycles(import_graph(ROOT)[0])
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(members) for members in found)


def test_every_app_module_has_a_layer():
    graph, _ = import_graph(ROOT)
    assert "app.commands.compare" in graph and "app.models.registry" in graph  # the walk found the tree
    unplaced = [m for m in graph if layer_of(m)[0] == "app" and m != "app"]
    assert unplaced == [], f"modules outside every layer (add their package to LAYERS and the docs): {unplaced}"


def test_the_installed_packages_never_import_lab_and_do_not_install_it():
    from setuptools import find_packages

    found = []
    for package in INSTALLED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                found += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "lab"]
    assert found == [], f"imports of lab/ in the product: {found}"
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packaged = find_packages(where=str(ROOT), include=include)
    assert "app.commands" in packaged and not [p for p in packaged if p.split(".")[0] == "lab"]
    assert not (ROOT / "app" / "bench" / "device").exists()


def test_the_checker_finds_a_planted_cycle_an_upward_and_a_peer_import(tmp_path):
    """The checker itself works, on a small tree: a two-module cycle, a three-module one, an import of a layer above
    (a function-level one), an import of a peer package; and nothing in a clean tree."""
    files = {"app/__init__.py": "", "app/cli.py": "from app.commands import run\n",
             "app/commands/__init__.py": "", "app/commands/run.py": "from app.workloads.engine import Engine\n",
             "app/tui/__init__.py": "", "app/tui/view.py": "from app.models import registry\n",
             "app/bench/__init__.py": "", "app/workloads/__init__.py": "", "app/workloads/engine.py": "Engine = 1\n",
             "app/models/__init__.py": "", "app/models/registry.py": "import os\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph, lines = import_graph(tmp_path)
    assert layer_violations(graph, lines) == [] and cycles(graph) == []
    (tmp_path / "app/models/registry.py").write_text("def f():\n    from app.tui.view import x\n")  # upward, lazy
    (tmp_path / "app/bench/timer.py").write_text("from app.tui import view\n")  # a peer
    (tmp_path / "app/commands/a.py").write_text("from app.commands import b\n")
    (tmp_path / "app/commands/b.py").write_text("import app.commands.a\n")
    (tmp_path / "app/workloads/x.py").write_text("from . import y\n")
    (tmp_path / "app/workloads/y.py").write_text("from app.workloads import z\n")
    (tmp_path / "app/workloads/z.py").write_text("from app.workloads.x import f\n")
    graph, lines = import_graph(tmp_path)
    problems = layer_violations(graph, lines)
    assert any("app.models.registry (line 2) imports app.tui.view, a layer above" in p for p in problems)
    assert any("app.bench.timer (line 1) imports app.tui.view, a peer" in p for p in problems)
    assert cycles(graph) == [["app.commands.a", "app.commands.b"],
                             ["app.models.registry", "app.tui.view"],
                             ["app.workloads.x", "app.workloads.y", "app.workloads.z"]]
