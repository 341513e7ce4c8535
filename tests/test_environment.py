"""The environment variables slabscope reads are the ones docs/environment.md lists, read from the tree.

* Every ``SLABSCOPE_*`` name in the source (``app/``, ``pool/``, ``probes/``, ``lab/``, ``tests/``, the Makefile,
  ``.ci/``) is in the doc's table of variables read, and every name in that table is in the source.
* A name the doc lists as no longer read appears nowhere in the product or the lab (tests may still name one, to
  check it is ignored).
* Every other document names only variables of the table (the measurements log keeps history, and the doc's own
  "No longer read" table names the old ones).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "environment.md"
NAME = re.compile(r"\bSLABSCOPE_[A-Z0-9_]*[A-Z0-9]\b")
SOURCE_DIRS = ("app", "pool", "probes", "lab", "tests")
SOURCE_FILES = ("Makefile", ".ci/run", ".ci/bootstrap", "pyproject.toml")
SUFFIXES = {".py", ".sh", ".toml", ".tcss", ".cfg"}
PRODUCT = ("app", "pool", "probes", "lab", "Makefile", ".ci")
HISTORY = {ROOT / "docs" / "measurements-log.md", DOC}


def doc_table(heading: str) -> set[str]:
    """The variables of the doc's table under ``## heading`` (first column)."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {row.split("`")[1] for row in rows}


def names_in_source() -> dict[str, set[str]]:
    """SLABSCOPE_* name -> the files (relative) that name it, this test file left out."""
    paths = [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    paths += [ROOT / f for f in SOURCE_FILES if (ROOT / f).exists()]
    found: dict[str, set[str]] = {}
    for path in paths:
        if path == Path(__file__).resolve() or "__pycache__" in path.parts:
            continue
        for name in NAME.findall(path.read_text(errors="replace")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_source_names_is_documented_and_every_documented_one_is_read():
    read, gone = doc_table("Variables slabscope reads"), doc_table("No longer read")
    assert len(read) >= 10 and not read & gone
    found = names_in_source()
    undocumented = {name: sorted(files) for name, files in found.items() if name not in read | gone}
    assert undocumented == {}, f"add these to docs/environment.md: {undocumented}"
    unread = sorted(read - set(found))
    assert unread == [], f"docs/environment.md lists variables nothing reads: {unread}"


def test_no_variable_that_is_no_longer_read_is_named_by_the_product_or_the_lab():
    gone = doc_table("No longer read")
    named = {name: sorted(f for f in files if f.split("/")[0] in PRODUCT)
             for name, files in names_in_source().items() if name in gone}
    assert {name: files for name, files in named.items() if files} == {}


def test_the_other_documents_name_only_variables_of_the_table():
    read = doc_table("Variables slabscope reads")
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "lab").rglob("README.md"))]
    stray = {f"{doc.relative_to(ROOT)}: {name}" for doc in docs if doc not in HISTORY
             for name in NAME.findall(doc.read_text()) if name not in read}
    assert stray == set(), f"documented but not in docs/environment.md's table (or no longer read): {sorted(stray)}"
