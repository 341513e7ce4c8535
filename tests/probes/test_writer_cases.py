"""Issue 23's writer cases for the commands that write finished files (``migrate``, ``export``): each keeps every
existing file intact (hashes of the whole folder before and after), refuses with one line and exit 1, and leaves no
partial file. Cases 2, 3, 4 and 7 (cases 1, 5 and 6 record runs: tests/workloads/test_recording_writers.py).
A full disk is simulated with a file-size limit (``RLIMIT_FSIZE``, in a subprocess) or an injected ``OSError``."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from probes.replay import Session

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "assets" / "recordings" / "sample-churn-slab.slabrec"  # 78 KiB, format v1
LIMIT = 16 * 1024  # a file-size limit below the migrated copy (~57 KB) and the trace


def folder_state(folder: Path) -> dict[str, str]:
    """Every name in ``folder`` (hidden ones too) -> sha256 of its bytes (a symlink: where it points)."""
    out = {}
    for entry in sorted(folder.iterdir()):
        out[entry.name] = ("-> " + os.readlink(entry)) if entry.is_symlink() else \
            hashlib.sha256(entry.read_bytes()).hexdigest()
    return out


def slabscope(argv: list, fsize: int | None = None) -> tuple[int, str, list[str]]:
    """One ``slabscope`` process (under a file-size limit when given): (exit code, stdout, stderr lines)."""
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))) if fsize else None
    result = subprocess.run([sys.executable, "-m", "app", *map(str, argv)], cwd=ROOT, capture_output=True, text=True,
                            preexec_fn=limit, timeout=300)
    return result.returncode, result.stdout, result.stderr.strip().splitlines()


@pytest.fixture
def run(cli):
    """``run(argv, fsize=None)``: in this process (the ``cli`` fixture), or in a subprocess under a file-size
    limit."""
    def invoke(argv: list, fsize: int | None = None):
        return slabscope(argv, fsize) if fsize else cli([str(a) for a in argv])

    return invoke


def one_line(err: list[str], *words: str) -> str:
    assert len(err) == 1 and "Traceback" not in err[0], err
    for word in words:
        assert word in err[0], err
    return err[0]


@pytest.fixture
def folder(tmp_path) -> Path:
    """A folder with a v1 recording (old.slabrec) and an earlier, different v2 recording (earlier.slabrec)."""
    from probes.migrate import migrate

    shutil.copy(V1, tmp_path / "old.slabrec")
    migrate(V1, tmp_path / "earlier.slabrec")
    return tmp_path


# ---- case 2: migrate X X (and through a link) --------------------------------------------------------------------
@pytest.mark.parametrize("link, force, fsize", [("same path", False, LIMIT), ("same path", True, None),
                                                ("symlink", False, None), ("hard link", False, None),
                                                ("symlink", True, None)])
def test_migrate_onto_its_own_input_is_refused_and_the_input_kept(folder, run, link, force, fsize):
    """At 5241d86 ``migrate X X`` rewrote X in place: the original gone, or (under a file-size limit) a 16 KiB
    v2 prefix of the 78 KiB v1 file and a traceback."""
    source = folder / "old.slabrec"
    target = {"same path": source, "symlink": folder / "ln.slabrec", "hard link": folder / "hl.slabrec"}[link]
    if link == "symlink":
        target.symlink_to(source)
    elif link == "hard link":
        os.link(source, target)
    before = folder_state(folder)
    code, out, err = run(["migrate", source, target, *(["--force"] if force else [])], fsize)
    assert code == 1 and out == ""
    one_line(err, "same file as the input", "never writes over its own input")
    assert folder_state(folder) == before
    assert Session.open(source).format_version == 1


# ---- case 4: migrate A B over an existing, different B -----------------------------------------------------------
def test_migrate_over_an_existing_recording_is_refused_unless_forced(folder, run):
    """At 5241d86 ``migrate A B`` overwrote an existing, different recording B silently."""
    before = folder_state(folder)
    code, out, err = run(["migrate", folder / "old.slabrec", folder / "earlier.slabrec"])
    assert code == 1 and out == ""
    one_line(err, "earlier.slabrec: exists", "--force")
    assert folder_state(folder) == before
    code, out, err = run(["migrate", folder / "old.slabrec", folder / "earlier.slabrec", "--force"])
    assert code == 0, err
    after = folder_state(folder)
    assert after["old.slabrec"] == before["old.slabrec"] and after["earlier.slabrec"] != before["earlier.slabrec"]
    assert set(after) == set(before)  # no temporary file left
    assert Session.open(folder / "earlier.slabrec").meta["migrated_from_format"] == 1


# ---- case 7: migrate on a full disk ------------------------------------------------------------------------------
@pytest.mark.parametrize("onto", ["a new name", "an existing recording, forced"])
def test_migrate_on_a_full_disk_is_one_line_and_leaves_no_partial_file(folder, onto):
    """At 5241d86: a traceback and a partial file (and, over an existing file, that file gone)."""
    target = folder / ("new.slabrec" if onto == "a new name" else "earlier.slabrec")
    before = folder_state(folder)
    force = [] if onto == "a new name" else ["--force"]
    code, out, err = slabscope(["migrate", folder / "old.slabrec", target, *force], fsize=LIMIT)
    assert code == 1 and out == ""
    one_line(err, f"{target}: writing failed, nothing written: File too large")
    assert folder_state(folder) == before  # the existing target as it was, no new or partial file


# ---- case 3: export R --out R ------------------------------------------------------------------------------------
@pytest.mark.parametrize("link, force", [("same path", False), ("symlink", False), ("same path", True)])
def test_export_onto_one_of_its_recordings_is_refused(folder, run, link, force):
    """At 5241d86 ``export R --out R`` replaced the recording with the trace."""
    recording = folder / "earlier.slabrec"
    out_path = recording if link == "same path" else folder / "trace.json"
    if link == "symlink":
        out_path.symlink_to(recording)
    before = folder_state(folder)
    code, out, err = run(["export", folder / "old.slabrec", recording, "--out", out_path,
                                *(["--force"] if force else [])])
    assert code == 1 and out == ""
    one_line(err, "same file as the input")
    assert folder_state(folder) == before


def test_export_onto_a_recording_in_a_folder_it_reads_is_refused(folder, run):
    before = folder_state(folder)
    code, _, err = run(["export", folder, "--out", folder / "old.slabrec", "--format", "chrome", "--force"])
    assert code == 1
    one_line(err, "old.slabrec: is the same file as the input")
    assert folder_state(folder) == before


def test_export_over_an_existing_file_needs_force(folder, tmp_path_factory, run):
    out_dir = tmp_path_factory.mktemp("trace")
    target = out_dir / "trace.json"
    target.write_text("an earlier trace")
    code, _, err = run(["export", folder / "old.slabrec", "--out", target])
    assert code == 1 and target.read_text() == "an earlier trace"
    one_line(err, "exists", "--force")
    code, out, err = run(["export", folder / "old.slabrec", "--out", target, "--force"])
    assert code == 0 and "wrote" in out and target.read_text().startswith('{"traceEvents"')
    assert sorted(p.name for p in out_dir.iterdir()) == ["trace.json"]


@pytest.mark.parametrize("how", ["file-size limit", "full disk mid-way", "exception mid-way"])
def test_a_failed_export_keeps_the_earlier_file_and_leaves_no_partial_one(folder, tmp_path_factory, how, cli,
                                                                           monkeypatch):
    """Over an earlier file (``--force``) a failure leaves it as it was; onto a new name it leaves nothing (at
    5241d86 an exception mid-way left ``.trace.json.partial`` behind)."""
    out_dir = tmp_path_factory.mktemp("trace")
    target = out_dir / "trace.json"
    argv = ["export", folder / "old.slabrec", "--out", target]
    if how != "exception mid-way":
        target.write_text("an earlier trace")
        argv.append("--force")
    before = folder_state(out_dir)
    if how == "file-size limit":
        code, out, err = slabscope(argv, fsize=LIMIT)
        one_line(err, "writing failed, nothing written: File too large")
    else:
        from probes import trace_chrome

        def broken(processes, path):
            with open(path, "w") as half:
                half.write('{"traceEvents": [')
            raise OSError(28, "No space left on device") if how == "full disk mid-way" else RuntimeError("bug")

        monkeypatch.setattr(trace_chrome, "write_chrome", broken)
        if how == "full disk mid-way":
            code, out, err = cli([str(a) for a in argv])
            one_line(err, "writing failed, nothing written: No space left on device")
        else:
            with pytest.raises(RuntimeError, match="bug"):
                cli([str(a) for a in argv])
            code = 1
    assert code == 1 and folder_state(out_dir) == before
