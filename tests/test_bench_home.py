"""One home for benchmarks (issue 11): every benchmark is a ``slabscope bench KIND`` command, read from the tree.

* No benchmark script lives under ``tests/`` (``bench_*.py``): a figure comes from a command a user can run.
* Every kind in ``app.commands.bench.BENCH_KINDS`` has its module with ``add_arguments`` and ``main``, and the
  README's command table names every kind.
* Every ``slabscope bench KIND`` the README or docs/ quote is a kind that exists, and a script path they quote that
  is gone says which command replaced it (a figure keeps the name of the script that printed it at its commit).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from app.commands.bench import BENCH_KINDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPT_PATH = re.compile(r"tests/[\w/.-]+\.py")
REPLACED_WITHIN = 300  # characters after a gone script's path within which its replacing command must be named


def test_no_benchmark_script_lives_in_tests():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("bench_*.py")) == []


def test_every_kind_has_its_command_module_and_a_readme_entry():
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `slabscope bench "))
    listed = row.split("`")[1].removeprefix("slabscope bench ").split("\\|")
    assert sorted(listed) == sorted(BENCH_KINDS)
    for kind in BENCH_KINDS:
        module = importlib.import_module(f"app.commands.bench_{kind}")
        assert callable(module.add_arguments) and callable(module.main), kind


def test_docs_quote_only_existing_kinds_and_name_what_replaced_a_gone_script():
    problems = []
    for doc in DOCS:
        text = doc.read_text()
        problems += [f"{doc.name}: slabscope bench {kind}" for kind in re.findall(r"slabscope bench ([a-z]+)", text)
                     if kind not in BENCH_KINDS]
        mapped = _history_map(doc, text)
        for match in SCRIPT_PATH.finditer(text):
            after = text[match.end():match.end() + REPLACED_WITHIN]
            if not (ROOT / match.group()).exists() and "slabscope bench" not in after and match.group() not in mapped:
                problems.append(f"{doc.name}: {match.group()} is gone and no replacing command is named")
    assert problems == []


def _history_map(doc: Path, text: str) -> str:
    """The measurements log quotes paths as they were at each entry's commit; its introduction (before the first
    entry) maps every renamed or removed one to what replaced it. Empty for every other document."""
    if doc.name != "measurements-log.md":
        return ""
    return text.split("\n## ", 1)[0]
