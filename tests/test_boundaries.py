"""Package boundaries, read from the source (like tests/tui/test_no_mlx.py for mlx).

* Nothing outside ``pool/`` reaches into a pool's bookkeeping or storage (``pool.book``, ``pool.storage``): kernels,
  step plans and benchmarks read ``PagedKVPool.layer_view``, recorders ``book_state``/``snapshot``.
* No package uses a private name (``_x``) that only another of slabscope's packages defines: not by import, not as
  an attribute of someone else's object.
* Imports point one way: app -> probes -> pool.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pool", "probes", "app")
POOL_INTERNALS = ("book", "storage")
ALLOWED_IMPORTS = {"pool": {"pool"}, "probes": {"pool", "probes"}, "app": {"pool", "probes", "app"}}


def _sources(package: str) -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted((ROOT / package).rglob("*.py"))]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(trees) -> set[str]:
    """Private names a package defines: functions, classes, methods, module globals, ``self._x``/``cls._x``
    attributes and ``__slots__`` entries."""
    names: set[str] = set()
    for _path, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _is_private(node.id):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_private(node.value):
                names.add(node.value)  # __slots__ = ("_heap", ...) and getattr(self, "_x", ...)
    return names


def _violations() -> list[str]:
    trees = {package: _sources(package) for package in PACKAGES}
    defined = {package: _defined_private_names(trees[package]) for package in PACKAGES}
    problems = []
    for package in PACKAGES:
        foreign = set().union(*(defined[p] for p in PACKAGES if p != package)) - defined[package]
        for path, tree in trees[package]:
            where = path.relative_to(ROOT)
            for node in ast.walk(tree):
                problems += _check_node(node, package, foreign, where)
    return problems


def _check_node(node: ast.AST, package: str, foreign: set[str], where: Path) -> list[str]:
    if isinstance(node, ast.Attribute):
        if package != "pool" and node.attr in POOL_INTERNALS:
            return [f"{where}:{node.lineno}: reaches into the pool's {node.attr!r} ({ast.unparse(node)})"]
        owner = node.value
        if node.attr in foreign and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            return [f"{where}:{node.lineno}: uses another package's private name ({ast.unparse(node)})"]
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
        top = node.module.split(".")[0]
        out = [f"{where}:{node.lineno}: imports {node.module} against the app -> probes -> pool direction"]
        out = out if top not in ALLOWED_IMPORTS[package] else []
        if top != package:
            out += [f"{where}:{node.lineno}: imports private {alias.name} from {node.module}"
                    for alias in node.names if _is_private(alias.name)]
        return out
    if isinstance(node, ast.Import):
        return [f"{where}:{node.lineno}: imports {alias.name} against the app -> probes -> pool direction"
                for alias in node.names
                if alias.name.split(".")[0] in PACKAGES and alias.name.split(".")[0] not in ALLOWED_IMPORTS[package]]
    return []


def test_no_package_reaches_into_another():
    problems = _violations()
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The checker itself works: a planted ``pool.book`` access and a foreign private name are reported."""
    tree = ast.parse("def f(pool, view):\n    pool.book.tables(0)\n    return view._snapshot_cache\n")
    found = [p for node in ast.walk(tree) for p in _check_node(node, "app", {"_snapshot_cache"}, Path("x.py"))]
    assert any("'book'" in p for p in found) and any("_snapshot_cache" in p for p in found)
    assert _check_node(ast.parse("from app.tui import data").body[0], "probes", set(), Path("y.py"))
