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

from rich.console import Console
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB
from textual.widgets import DataTable
from tui_helpers import settle, wait_for
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


HOSTILE = {"zeroed-tail": "zero bytes from byte", "mid-length": "a valid record follows at byte",
           "foreign": "follows the end record", "bad-keyframe": "op_index -5 is outside",
           "bad-ops": "malformed ops record", "huge-op": "the most a replay holds"}


async def _drive(app: SlabscopeApp, pilot, columns=SEEK_COLUMNS, keys=KEYS) -> None:
    """Seek to the start and the end (scrubber clicks) and show the views that read lazily decoded records there
    (every tab is shown by tests/tui/test_app.py), using the inspector's keys; the app must still run after
    each."""
    for column in columns:
        await pilot.click("#scrubber", offset=(column, 0))
        for key in keys:
            await pilot.press(key)
            assert app.is_running, f"the app stopped after {key!r}"
        await settle(pilot)


def _noting_app(options: AppOptions) -> tuple[SlabscopeApp, list[str]]:
    """An app whose notifications are also kept in a list (what a person reads)."""
    app = SlabscopeApp(options)
    notes: list[str] = []
    notify = app.notify
    app.notify = lambda message, **kw: (notes.append(str(message)), notify(message, **kw))[1]
    return app, notes


def test_hostile_recordings_listed_opened_and_used_in_every_view(tmp_path):
    """One dashboard on a folder of hostile files (as a person meets them in the Sessions view). FIFOs, devices
    and directories named like recordings are skipped (a FIFO blocked every tool); a sparse GiB or an oversized
    file is listed with its one-line reason; damaged files are marked as such. Then every listed file is opened
    in turn (Enter) and every view that reads lazily decoded records is used at the start and the end: each
    damaged file is said once, in a notification, and the app stays up throughout. (The first is opened as
    ``--open`` does, at start.)"""
    recs = tmp_path / "recs"
    recs.mkdir()
    for kind in ("fifo", "dev_zero", "directory", "sparse", "oversize", "empty"):
        make_special(kind, recs)
    for name, path in _hostile_files(tmp_path).items():
        os.replace(path, recs / path.name)
    first = recs / "zeroed-tail.slabrec"

    async def go():
        app, notes = _noting_app(AppOptions(autostart=False, recordings_dir=recs, open_paths=[first]))
        said: dict[str, list[str]] = {}
        async with app.run_test(size=(110, 34)) as pilot:
            await settle(pilot)
            said[first.stem] = list(notes)
            await _drive(app, pilot)
            await pilot.press("7")
            await settle(pilot)
            listing = screen_text(app)
            view = app.screen.query_one("#view-sessions")
            names = [info.path.name for info in view.infos]
            for name in names:
                if name == first.name:
                    continue
                await pilot.press("7")
                table = app.screen.query_one("#sessions-list", DataTable)
                table.move_cursor(row=len(view.folders) + names.index(name))  # folders (..) are listed first
                table.focus()
                seen, generation = len(notes), app.store.generation
                await pilot.press("enter")
                await wait_for(pilot, lambda: app.opening is None)  # a large file opens off the UI thread
                await settle(pilot)
                if app.store.generation != generation:  # it opened (an oversized file is refused in one line)
                    await _drive(app, pilot)
                said[Path(name).stem] = notes[seen:]
            return app, listing, names, said, app.is_running

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        app, listing, names, said, running = asyncio.run(go())
    assert "fifo.slabrec" not in listing and "dev_zero.slabrec" not in listing and "directory" not in names
    assert "oversize.slabrec" in listing and "over the" in listing
    assert "damaged: " in listing and running and app.return_code in (None, 0)
    assert set(names) == {f"{name}.slabrec" for name in HOSTILE} | {"oversize.slabrec"}  # not a recording: unlisted
    refused = [note for note in said["oversize"] if not note.startswith("opening ")]  # a large file says it opens
    assert len(refused) == 1 and "over the" in refused[0]
    for name, text in HOSTILE.items():  # said once, in a notification, when its file was opened and used
        assert sum(text in note for note in said[name]) == 1, (name, said[name])


def test_lane_draws_no_mark_for_a_time_that_is_not_finite():
    """A NaN event time crashed the lane widget (int(nan)); readers refuse such times now, and the widget leaves
    out a mark it cannot place."""
    lane = Lane()
    lane.show(float("nan"), {"steps": [(float("nan"), "x", ""), (1.0, "y", ""), (float("inf"), "z", "")]},
              cursor=float("nan"))
    assert lane._lanes == {"steps": [(1.0, "y", "")]} and lane._cursor is None and lane._span > 0
    Console(width=60, file=open(os.devnull, "w")).print(lane.render())


def test_randomly_damaged_recordings_never_stop_the_dashboard(tmp_path):
    """A few fuzzed recordings (``make fuzz``: SLABSCOPE_FUZZ_SCALE times more): the ones ``--open`` does not
    refuse in one line are opened in turn in one dashboard and used in every view that decodes lazily."""
    from app.commands.tui import check_recording

    rng = random.Random(12)
    mutator = Mutator(rng, b"")
    blobs = [SAMPLE_SLAB.read_bytes(), SAMPLE_DENSE.read_bytes()]
    cases = []
    for case in range(3 * SCALE):
        mutation = rng.choice([m for m in MUTATIONS if m not in ("bomb", "special")])
        path = tmp_path / f"case{case}.slabrec"
        path.write_bytes(mutator.apply(mutation, blobs[case % 2], blobs[1 - case % 2]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordingDamage)
            try:
                check_recording(path)  # what --open does before the TUI starts: a one-line refusal
            except SystemExit as exc:
                assert "\n" not in str(exc.code)
                continue
        cases.append((mutation, path))
    assert cases  # at least one damaged file got past the refusal into the app

    async def go():
        app, _ = _noting_app(AppOptions(autostart=False, recordings_dir=tmp_path))
        async with app.run_test(size=(110, 34)) as pilot:
            for mutation, path in cases:
                app.open_recordings([path])
                await settle(pilot)
                await _drive(app, pilot)
                assert app.is_running, mutation
        return app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        assert asyncio.run(go()).return_code in (None, 0)
