"""``probes.outfile``: one writer per path, nothing written over an existing file or an input unasked, finished
files published whole (issue 23, item 2). Concurrency is synchronised on events (a barrier, a "ready" line from a
writer holding its lock), never on sleeps."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

from probes import format as fmt
from probes import outfile
from probes.outfile import OutputError, adopt, check_not_input, claim, write_atomically

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _race_for(path: str, barrier, results, name: str) -> None:
    """A process that claims ``path`` once the other is ready too, writes its name and exits (closing = release)."""
    barrier.wait()
    try:
        held = claim(path)
    except OutputError as exc:
        results.put((name, "refused", str(exc)))
        return
    os.write(held.fd, name.encode())
    results.put((name, "won", ""))


def test_two_processes_claiming_one_path_at_once_give_one_writer(tmp_path):
    """Released together by a barrier; whatever the interleaving, the kernel's O_EXCL lets one create the file."""
    path = str(tmp_path / "race.slabrec")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_for, args=(path, barrier, results, name)) for name in ("a", "b")]
    for proc in procs:
        proc.start()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for proc in procs:
        proc.join(60)
    won = [name for name, what, _ in outcomes if what == "won"]
    refused = [text for _, what, text in outcomes if what == "refused"]
    assert len(won) == 1 and len(refused) == 1, outcomes
    assert "exists" in refused[0] or "being written" in refused[0] or "taken by another writer" in refused[0]
    assert open(path, "rb").read() == won[0].encode()  # the winner's bytes, nothing of the loser's


HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from probes import format as fmt
    writer = fmt.RecordWriter(sys.argv[1], "live-session")
    writer.append([(fmt.META, 0.0, b"live")])
    print("ready", flush=True)
    sys.stdin.readline()   # hold the file (and its lock) until the test says so
    writer.append([(fmt.END, 1.0, b"end")])
    writer.close()
""")


class LiveWriter:
    """A ``RecordWriter`` in another process, holding its file until ``finish``."""

    def __init__(self, path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), ROOT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"  # the event: the file exists and is locked

    def finish(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0


def test_a_live_writer_is_refused_even_with_force_and_its_file_stays_whole(tmp_path):
    path = tmp_path / "live.slabrec"
    live = LiveWriter(path)
    before = path.read_bytes()
    for force in (False, True):
        with pytest.raises(OutputError, match="being written by another slabscope process"):
            claim(path, force=force)
        with pytest.raises(OutputError, match="being written by another slabscope process"):
            write_atomically(path, lambda temp: open(temp, "wb").write(b"x"), force=force)
    assert path.read_bytes() == before
    live.finish()
    image = fmt.FileImage(path)
    assert [ref.kind for ref in image.refs] == [fmt.META, fmt.END] and image.damage is None
    assert sorted(os.listdir(tmp_path)) == ["live.slabrec"]  # no temporary file left beside it


def test_an_existing_file_is_refused_unless_forced_then_replaced_by_a_locked_new_file(tmp_path):
    path = tmp_path / "old.slabrec"
    path.write_bytes(b"earlier recording")
    with pytest.raises(OutputError, match=r"exists \(17 bytes\).*--force"):
        claim(path)
    assert path.read_bytes() == b"earlier recording"
    held = claim(path, force=True)
    assert path.read_bytes() == b"" and os.fstat(held.fd).st_ino == os.stat(path).st_ino
    with pytest.raises(OutputError, match="being written"):  # the new file is the live one now
        claim(path, force=True)
    os.write(held.fd, b"new")
    held.release()
    assert path.read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["old.slabrec"]


def test_a_claim_whose_run_never_wrote_is_removed_at_release(tmp_path):
    path = tmp_path / "empty.slabrec"
    held = claim(path)
    held.release()
    held.release()  # idempotent
    assert not path.exists()


def test_adopt_takes_only_the_claimed_empty_file(tmp_path):
    path = tmp_path / "claimed.slabrec"
    held = claim(path)
    fd = adopt(path, held.token)
    os.write(fd, b"records")
    os.close(fd)
    with pytest.raises(OutputError, match="no longer the empty file claimed"):  # written already
        adopt(path, held.token)
    other = tmp_path / "other.slabrec"
    other.write_bytes(b"")
    with pytest.raises(OutputError, match="no longer the empty file claimed"):  # another file at another inode
        adopt(other, held.token)
    held.release()
    assert path.read_bytes() == b"records"


@pytest.mark.parametrize("link", ["same path", "symlink", "hard link", "through a symlinked directory"])
def test_a_target_that_is_an_input_is_refused_by_its_real_file(tmp_path, link):
    source = tmp_path / "in.slabrec"
    source.write_bytes(b"input")
    target = {"same path": lambda: source,
              "symlink": lambda: (tmp_path / "ln.slabrec").symlink_to(source) or tmp_path / "ln.slabrec",
              "hard link": lambda: os.link(source, tmp_path / "hl.slabrec") or tmp_path / "hl.slabrec",
              "through a symlinked directory":
                  lambda: (tmp_path / "dir").symlink_to(tmp_path) or tmp_path / "dir" / "in.slabrec"}[link]()
    with pytest.raises(OutputError, match="same file as the input"):
        check_not_input(target, [source])
    for force in (False, True):
        with pytest.raises(OutputError, match="same file as the input"):
            write_atomically(target, lambda temp: open(temp, "wb").write(b"x"), force=force, inputs=[source])
        with pytest.raises(OutputError, match="same file as the input"):
            claim(target, force=force, inputs=[source])
    assert source.read_bytes() == b"input"
    check_not_input(tmp_path / "new.slabrec", [source])  # a new name is no input


def test_a_failed_write_leaves_the_target_as_it_was_and_no_partial_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_bytes(b"the earlier file")

    def half_then_full_disk(temp):
        with open(temp, "wb") as out:
            out.write(b"half of it")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="writing failed, nothing written: No space left on device"):
        write_atomically(target, half_then_full_disk, force=True)

    def then_a_bug(temp):
        open(temp, "wb").write(b"half")
        raise KeyError("mid-way")

    with pytest.raises(KeyError):
        write_atomically(target, then_a_bug, force=True)
    assert target.read_bytes() == b"the earlier file" and sorted(os.listdir(tmp_path)) == ["out.json"]


def test_a_finished_file_is_synced_before_it_gets_its_name(tmp_path, monkeypatch):
    """The order that makes a crash leave either the old or the whole new file: fsync the temporary file, then
    link/rename it to the target, then fsync the directory."""
    calls = []
    real_fsync, real_link, real_rename = os.fsync, os.link, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.path.basename(os.readlink(
        f"/proc/self/fd/{fd}")))) or real_fsync(fd))
    monkeypatch.setattr(os, "link", lambda a, b: calls.append(("link", os.path.basename(b))) or real_link(a, b))
    monkeypatch.setattr(os, "rename", lambda a, b: calls.append(("rename", os.path.basename(b))) or real_rename(a, b))
    write_atomically(tmp_path / "new.bin", lambda temp: open(temp, "wb").write(b"data"))
    assert [c[0] for c in calls] == ["fsync", "link", "fsync"] and calls[0][1].endswith(".partial")
    assert calls[1][1] == "new.bin" and calls[2][1] == os.path.basename(tmp_path)
    calls.clear()
    write_atomically(tmp_path / "new.bin", lambda temp: open(temp, "wb").write(b"more"), force=True)
    assert [c[0] for c in calls] == ["fsync", "rename", "fsync"] and (tmp_path / "new.bin").read_bytes() == b"more"


def test_a_target_created_while_the_file_was_written_is_not_overwritten(tmp_path):
    """The check before the work is not the last word: the name is taken only if free when published."""
    target = tmp_path / "late.bin"

    def someone_else_writes_it_meanwhile(temp):
        open(temp, "wb").write(b"ours")
        target.write_bytes(b"theirs")

    with pytest.raises(OutputError, match="exists"):
        write_atomically(target, someone_else_writes_it_meanwhile)
    assert target.read_bytes() == b"theirs" and sorted(os.listdir(tmp_path)) == ["late.bin"]


def test_record_writer_refuses_an_existing_file_and_replaces_it_only_when_forced(tmp_path):
    path = tmp_path / "rec.slabrec"
    first = fmt.RecordWriter(path, "s1")
    first.append([(fmt.META, 0.0, b"one")])
    first.close()
    before = digest(path)
    with pytest.raises(OutputError, match="exists"):
        fmt.RecordWriter(path, "s2")
    assert digest(path) == before
    second = fmt.RecordWriter(path, "s2", force=True)
    second.close()
    assert fmt.FileImage(path).refs == [] and digest(path) != before
    assert outfile.CREATE & os.O_EXCL  # the kernel's one-creator rule is what the writer relies on
