"""The TUI on hostile recordings (issue 12): ``--open`` and the Sessions view never crash or block on what a file
holds. A damaged file opens on its valid prefix with a warning; a record that turns out malformed only when a view
first decodes it is notified once and costs that view its picture, not the dashboard; special files are listed
or refused without being read. Driven as a person does (Pilot: every tab, seeking, the inspector's keys)."""

from __future__ import annotations

import asyncio
import copy
import os
import random
import sys
import warnings
from pathlib import Path

import pytest
from rich.console import Console
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.widgets.lane import Lane
from probes import format as fmt
from probes.errors import RecordingDamage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probes"))
from recording_craft import build, edited, first, parse  # noqa: E402
from recording_fuzz import MUTATIONS, Mutator, make_special  # noqa: E402

SCALE = int(os.environ.get("SLABSCOPE_FUZZ_SCALE", "1"))
KEYS = ["2", "4", "6", "e", "u", "1"]  # slab grid, gather runs, inspector (a sequence, a free run), memory
SEEK_COLUMNS = (0, 91)  # the scrubber's start and end at a width of 110


def _edit(blob: bytes, kind: int, change, last: bool = False) -> bytes:
    """``blob`` with the first (or last) record of ``kind`` re-encoded after ``change(payload)``."""
    version, recs = parse(blob)
    i = max(k for k, r in enumerate(recs) if r.kind == kind) if last else first(recs, kind)
    payload = copy.deepcopy(recs[i].payload)
    change(payload)
    return build(version, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:])


def _hostile_files(folder: Path) -> dict[str, Path]:
    """Recordings the TUI must survive: damaged ones it opens (prefix + warning), ones whose damage shows only
    when a view decodes a keyframe or the op log, and ones it must refuse."""
    slab = SAMPLE_SLAB.read_bytes()

    def keyframe_op_index(p):
        p["op_index"] = -5

    def teleport(p):
        p[-1]["op"] = "teleport"

    def huge_tokens(p):
        next(op for op in p if op["op"] == "prepare_write")["num_tokens"] = 10**12

    files = {
        "zeroed-tail": slab[:-3000] + b"\0" * 3000,
        "mid-length": slab[:40000] + (len(slab) * 2).to_bytes(4, "little") + slab[40004:],
        "foreign": slab + SAMPLE_DENSE.read_bytes()[fmt.FILE_HEADER.size:],
        "bad-keyframe": _edit(slab, fmt.KEYFRAME, keyframe_op_index, last=True),
        "bad-ops": _edit(slab, fmt.OPS, teleport),  # the inspector reads it (copy-on-write rows), rebuilds may not
        "huge-op": _edit(slab, fmt.OPS, huge_tokens),
    }
    out = {}
    for name, blob in files.items():
        out[name] = folder / f"{name}.slabrec"
        out[name].write_bytes(blob)
    return out


async def _drive(app: SlabscopeApp, pilot, columns=SEEK_COLUMNS, keys=KEYS) -> None:
    """Seek to the start and the end (scrubber clicks) and show the views that read lazily decoded records there
    (every tab is shown by tests/tui/test_app.py), using the inspector's keys; the app must still run after
    each."""
    for column in columns:
        await pilot.click("#scrubber", offset=(column, 0))
        for key in keys:
            await pilot.press(key)
            assert app.is_running, f"the app stopped after {key!r}"
        await pilot.pause(0.05)


def _run(paths: list[Path], recordings_dir: Path) -> tuple[SlabscopeApp, list[str]]:
    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=recordings_dir, open_paths=paths))
        notes: list[str] = []
        notify = app.notify
        app.notify = lambda message, **kw: (notes.append(str(message)), notify(message, **kw))[1]
        async with app.run_test(size=(110, 34)) as pilot:
            await pilot.pause(0.1)
            await _drive(app, pilot)
        return app, notes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        return asyncio.run(go())


@pytest.mark.parametrize("name, said", [
    ("zeroed-tail", "zero bytes from byte"), ("mid-length", "a valid record follows at byte"),
    ("foreign", "follows the end record"), ("bad-keyframe", "op_index -5 is outside"),
    ("bad-ops", "malformed ops record"), ("huge-op", "the most a replay holds")])
def test_open_hostile_recordings_and_use_every_view(tmp_path, name, said):
    path = _hostile_files(tmp_path)[name]
    app, notes = _run([path], tmp_path)
    assert app.return_code in (None, 0)
    assert any(said in note for note in notes), notes  # said once, in a notification


def test_sessions_view_lists_special_files_without_reading_them(tmp_path):
    """FIFOs, devices and directories named like recordings are skipped (a FIFO blocked every tool); a sparse
    GiB or an oversized file is listed with its one-line reason; damaged files are marked as such."""
    recs = tmp_path / "recs"
    recs.mkdir()
    for kind in ("fifo", "dev_zero", "directory", "sparse", "oversize", "empty"):
        make_special(kind, recs)
    for name, path in _hostile_files(tmp_path).items():
        os.replace(path, recs / path.name)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=recs))
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.press("7")
            await pilot.pause(0.2)
            listing = screen_text(app)
            for row in range(8):  # open every listed file in turn
                await pilot.press("7", *["down"] * row, "enter")
                await pilot.pause(0.1)
                await _drive(app, pilot, columns=(91,), keys=("2",))
            return app, listing, app.is_running  # still up after every file was opened

    app, listing, running = asyncio.run(go())
    assert "fifo.slabrec" not in listing and "dev_zero.slabrec" not in listing
    assert "oversize.slabrec" in listing and "over the" in listing
    assert "damaged: " in listing and running and app.return_code in (None, 0)


def test_lane_draws_no_mark_for_a_time_that_is_not_finite():
    """A NaN event time crashed the lane widget (int(nan)); readers refuse such times now, and the widget leaves
    out a mark it cannot place."""
    lane = Lane()
    lane.show(float("nan"), {"steps": [(float("nan"), "x", ""), (1.0, "y", ""), (float("inf"), "z", "")]},
              cursor=float("nan"))
    assert lane._lanes == {"steps": [(1.0, "y", "")]} and lane._cursor is None and lane._span > 0
    Console(width=60, file=open(os.devnull, "w")).print(lane.render())


def test_randomly_damaged_recordings_never_stop_the_dashboard(tmp_path):
    """A few fuzzed recordings (``make fuzz``: SLABSCOPE_FUZZ_SCALE times more) opened and used in the app."""
    rng = random.Random(12)
    mutator = Mutator(rng, b"")
    blobs = [SAMPLE_SLAB.read_bytes(), SAMPLE_DENSE.read_bytes()]
    opened = 0
    for case in range(3 * SCALE):
        mutation = rng.choice([m for m in MUTATIONS if m not in ("bomb", "special")])
        path = tmp_path / f"case{case}.slabrec"
        path.write_bytes(mutator.apply(mutation, blobs[case % 2], blobs[1 - case % 2]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordingDamage)
            from app.commands.tui import check_recording
            try:
                check_recording(path)  # what --open does before the TUI starts: a one-line refusal
            except SystemExit as exc:
                assert "\n" not in str(exc.code)
                continue
        app, _ = _run([path], tmp_path)
        assert app.return_code in (None, 0), mutation
        opened += 1
    assert opened  # at least one damaged file got past the refusal into the app
