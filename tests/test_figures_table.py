"""The README's figures are one table of current figures, each with its command and commit, and the scripts the
docs quote exist (read from the tree, like tests/test_bench_home.py).

* The README has one "Current figures" table (figure, value, command, commit) and no dated journal ("Latest (...)").
* Every row names a command (quoted) or points at the row above it, and a commit of this repository's history.
* Every ``lab/`` script or ``python3 -m lab.*`` module the README, docs/ or lab/'s READMEs quote exists.
* The scripts' old home, ``app/bench/device/``, is named only where history is kept: the measurements log (whose path
  map gives every old script's new path) and lab/README.md (what was deleted).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LOG = ROOT / "docs" / "measurements-log.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "lab").rglob("README.md"))]
OLD_HOME = "app/bench/device/"
HISTORY = {LOG, ROOT / "lab" / "README.md"}


def figures_rows() -> list[list[str]]:
    """The cells of every row of the README's "Current figures" table (header and rule left out)."""
    text = README.read_text()
    section = text.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].replace(" ", "") == "|figure|value|command|commit|", rows[0]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def test_the_readme_keeps_one_table_of_current_figures_and_no_journal():
    text = README.read_text()
    assert text.count("## Current figures") == 1 and "Latest (" not in text
    assert "What it measures" not in text
    rows = figures_rows()
    assert len(rows) >= 15
    for cells in rows:
        assert len(cells) == 4 and all(cells), cells
        figure, value, command, commit = cells
        assert re.search(r"\d", value), f"{figure}: a value without a figure"
        assert "`" in command or command.startswith("the "), f"{figure}: no command ({command!r})"
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), f"{figure}: commit {commit!r}"


def test_every_figure_names_a_commit_of_this_history():
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here (an exported tree): the commits cannot be looked up")
    shallow = subprocess.run([git, "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone does not hold the commits the figures were measured at")
    missing = [commit for *_, commit in figures_rows()
               if subprocess.run([git, "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                                 capture_output=True).returncode != 0]
    assert missing == [], f"commits the table names that this history does not hold: {missing}"


def test_every_lab_script_the_docs_quote_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        for path in re.findall(r"\blab/[\w/]+\.(?:sh|py|md)\b", text):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
        for module in re.findall(r"python3? -m (lab(?:\.\w+)+)", text):
            where = ROOT / module.replace(".", "/")
            if not (where.with_suffix(".py").exists() or (where / "__init__.py").exists()):
                missing.append(f"{doc.relative_to(ROOT)}: python -m {module}")
    assert missing == []


def test_the_old_script_home_is_named_only_where_history_is_kept():
    named = [str(doc.relative_to(ROOT)) for doc in DOCS if OLD_HOME in doc.read_text() and doc not in HISTORY]
    assert named == [], f"quote the lab/ path instead: {named}"
    log = LOG.read_text()
    path_map = log.split("| path in an entry | today |", 1)[1].split("\n\n", 1)[0]
    mapped = set(re.findall(r"`(?:app/bench/device/)?([\w.]+\.(?:sh|py))`", path_map))
    quoted = set(re.findall(re.escape(OLD_HOME) + r"([\w.]+\.(?:sh|py))", log.split(path_map, 1)[1]))
    assert quoted and quoted <= mapped, f"old scripts the log quotes without a new path: {sorted(quoted - mapped)}"
