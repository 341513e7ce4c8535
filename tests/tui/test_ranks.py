"""A distributed run's rank recordings in the TUI, as a person uses it (Pilot): opened as one run (the Ranks view's
header, per-rank lanes on rank 0's clock, the imbalance row per phase), the pool views per rank with every rank at
the same aligned instant, a missing rank as one line with the other ranks still openable alone, a rank that died,
and the run form's ranks field."""

from __future__ import annotations

import asyncio
import os

import pytest
from textual.widgets import DataTable, Input, Select
from tui_helpers import settle, wait_for
from tui_rank_fixtures import RANK_DIR, RANK_FILES, copy_rank_dir, write_rank, write_rank_run
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.screens.run_form import RunFormScreen
from app.tui.views.ranks import imbalance_cells
from app.tui.widgets.memory_chart import MemoryChart
from app.tui.widgets.scrubber import Scrubber
from probes.ranks import group_runs, imbalance_rows, rank_lanes
from probes.replay import Session


def run(coro):
    return asyncio.run(coro)


def replay_app(paths, tmp_path) -> SlabscopeApp:
    return SlabscopeApp(AppOptions(autostart=False, open_paths=list(paths), recordings_dir=tmp_path))


async def show(pilot, *keys) -> str:
    for key in keys:
        await pilot.press(key)
    await settle(pilot)
    return screen_text(pilot.app)


def test_rank_recordings_open_as_one_run_with_header_lanes_and_imbalance(tmp_path):
    async def go():
        app = replay_app([RANK_DIR], tmp_path)
        async with app.run_test(size=(130, 44)) as pilot:
            await settle(pilot)
            text = await show(pilot, "8")
            table = app.query_one("#ranks-table", DataTable)
            cells = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
            return app, text, cells, app.query_one("#ranks-chart", MemoryChart).last

    app, text, cells, chart = run(go())
    expected_runs, plain = group_runs([Session.open(p) for p in sorted(RANK_DIR.glob("*.slabrec"))])
    assert plain == [] and [r.label for r in app.store.runs] == [r.label for r in expected_runs]
    assert set(app.store.sessions) == {"slab r0", "slab r1", "dense r0", "dense r1"}
    for run_ in expected_runs:  # header: world size, launch backend, clock bound
        bound = max(c.bound_s for c in run_.clocks)
        assert f"{run_.label}: 2 ranks via mlx.launch (ring)  clock bound {bound * 1e3:.3f} ms" in text
    assert "r1 ✓ vm pid" in text and "KV heads [1, 2) of 2" in text
    # the merged imbalance row per phase: the probes' figures, cell for cell
    assert cells == [tuple(str(c) for c in imbalance_cells(r)) for run_ in expected_runs for r in imbalance_rows(run_)]
    assert any(c[1] == "churn" and c[6].startswith("r") for c in cells)  # the rank that peaked first
    # per-rank lanes: every rank's footprint on rank 0's clock
    lanes = [lane for run_ in expected_runs for lane in rank_lanes(run_)]
    assert [s.label for s in chart.series] == ["dense r0", "dense r1", "slab r0", "slab r1"]
    assert [s.xs for s in chart.series] == [[t for t, _ in lane] for lane in lanes]


def test_cursor_seeks_every_rank_to_the_same_aligned_instant(tmp_path):
    """Rank 1 started 0.5 s after rank 0: at the shared instant 6.5 s the pool views show rank 1 as it was at its
    own 6.0 s; lanes and chart put rank 1's samples 0.5 s later on the axis."""
    directory = write_rank_run(tmp_path / "ranks", shift=0.5, backends=("slab",))

    async def go():
        app = replay_app([directory], tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            app.post_message(Scrubber.Seek(6.5))
            await settle(pilot)
            before = app.frame().pool_session().label
            slabs = await show(pilot, "2", "w")
            shown = app.frame().snapshot()
            ranks = await show(pilot, "8")
            memory = await show(pilot, "1")
            return app, before, slabs, shown, ranks, app.query_one("#memory-chart", MemoryChart).last

    app, before, slabs, shown, ranks, chart = run(go())
    r0, r1 = app.store.sessions["slab r0"], app.store.sessions["slab r1"]
    assert app.cursor == 6.5 and before == "slab r0" and app.pool_name == "slab r1"
    assert r1.snapshot_at(6.0) != r1.snapshot_at(6.5)  # the test can tell the two instants apart
    assert shown == (6.5, r1.snapshot_at(6.0))
    assert "slab r1 (slab) @ 6.5s" in slabs
    series = {s.label: s for s in chart.series}
    assert series["slab r1 act+cache"].xs == [t + 0.5 for t in r1.samples.window().t]
    assert series["slab r0 act+cache"].xs == r0.samples.window().t
    assert app.store.duration() == pytest.approx(r1.duration + 0.5)
    assert "slab: 2 ranks via mlx.launch (ring)" in ranks and "clock +0.000 ms" in ranks


def test_w_cycles_the_ranks_of_the_pool_run(tmp_path):
    async def go():
        app = replay_app([RANK_DIR], tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            names = []
            for _ in range(3):
                await pilot.press("w")
                names.append(app.pool_name)
            return names

    assert run(go()) == ["slab r1", "slab r0", "slab r1"]


def test_a_missing_rank_is_one_line_and_the_other_ranks_open_alone(tmp_path):
    directory = copy_rank_dir(tmp_path, ["churn-slab-rank0.slabrec", "churn-dense-rank0.slabrec",
                                         "churn-dense-rank1.slabrec"])
    (directory / "torn.slabrec").write_bytes(RANK_FILES[0].read_bytes()[:16] + b"\xa5R\x09garbage" * 4)

    async def go(paths):
        app = replay_app(paths, tmp_path)
        async with app.run_test(size=(130, 40)) as pilot:
            await settle(pilot)
            messages = [n.message for n in app._notifications]
            return app, messages, await show(pilot, "8")

    app, messages, text = run(go([directory]))
    errors = [m for m in messages if "is missing" in m]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert "(slab): rank 1 of 2 is missing (found rank0)" in errors[0] and "showing its other ranks alone" in errors[0]
    corrupt = [m for m in messages if "torn.slabrec" in m]
    assert len(corrupt) == 1 and "cannot open" in corrupt[0] and "corrupt record header" in corrupt[0]
    assert [r.label for r in app.store.runs] == ["dense"]  # the complete run still merges
    assert "slab r0" in app.store.sessions and app.store.run_of(app.store.sessions["slab r0"]) is None
    assert "slab r0: rank 0 of 2 of run" in text and "shown alone" in text
    # one rank file named on its own opens as itself, without an error
    app, messages, text = run(go([directory / "churn-slab-rank0.slabrec"]))
    assert list(app.store.sessions) == ["slab r0"] and not any("missing" in m for m in messages)
    assert app.mode == "REPLAY" and "shown alone" in text


def test_a_rank_that_died_is_shown_and_the_run_still_opens(tmp_path):
    directory = tmp_path / "ranks"
    directory.mkdir()
    write_rank(directory / "x-slab-rank0.slabrec", "slab", 0)
    write_rank(directory / "x-slab-rank1.slabrec", "slab", 1, close=False)

    async def go():
        app = replay_app([directory], tmp_path)
        async with app.run_test(size=(130, 40)) as pilot:
            await settle(pilot)
            return app, await show(pilot, "8")

    app, text = run(go())
    assert [r.label for r in app.store.runs] == ["slab"]
    assert "r0 ✓" in text and "r1 ✗" in text and "died: recording never closed" in text


def test_enter_on_a_rank_recording_in_sessions_opens_its_whole_run(tmp_path):
    directory = copy_rank_dir(tmp_path)
    for index, path in enumerate(sorted(directory.iterdir())):  # newest first: churn-slab-rank1 tops the list
        os.utime(path, (1_700_000_000 + index,) * 2)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=directory))
        async with app.run_test(size=(130, 40)) as pilot:
            listing = await show(pilot, "7")
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.mode == "REPLAY", timeout=10)
            return app, listing

    app, listing = run(go())
    assert "slab r1/2" in listing and "dense r0/2" in listing
    assert [r.label for r in app.store.runs] == ["slab"] and set(app.store.sessions) == {"slab r0", "slab r1"}


def test_run_form_ranks_are_checked_before_anything_starts(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr("app.tui.ingest.RunController.start_ranks", lambda self, choice, out: started.append(
        (choice, out)))

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=tmp_path / "recs"))
        async with app.run_test(size=(110, 40)) as pilot:
            await pilot.press("n")
            await settle(pilot)
            form = app.screen
            assert isinstance(form, RunFormScreen)
            form.query_one("#form-ranks", Input).value = "2"
            form.query_one("#form-model", Select).value = "smollm2-135m"
            await pilot.press("ctrl+s")
            await settle(pilot)
            heads = str(form.query_one("#form-error").render())
            form.query_one("#form-model", Select).value = "synthetic:tiny-llama"
            form.query_one("#form-launch", Select).value = "jaccl"
            await pilot.press("ctrl+s")
            await settle(pilot)
            jaccl = str(form.query_one("#form-error").render())
            form.query_one("#form-launch", Select).value = "ring"
            await pilot.press("ctrl+s")
            await settle(pilot)
            return app, heads, jaccl

    app, heads, jaccl = run(go())
    assert "3 KV heads, which do not split evenly across 2 ranks" in heads
    assert "jaccl backend needs --hostfile" in jaccl
    (choice, out), = started
    assert (choice.ranks, choice.launch_backend, choice.model) == (2, "ring", "synthetic:tiny-llama")
    assert out.parent == tmp_path / "recs" and out.name.startswith("ranks-")
    assert app.options.ranks == 2 and app.mode == "LIVE"


def test_cli_checks_ranks_before_the_tui_starts_and_opens_directories(tmp_path):
    import app.commands.tui as tui_cmd
    from app import cli
    from app.commands.errors import UsageError

    def options(*argv):
        return tui_cmd.build_options(cli.build_parser().parse_args(["tui", *argv]))

    with pytest.raises(UsageError, match="2 KV heads, which do not split evenly across 3 ranks"):
        options("--ranks", "3", "--model", "synthetic:tiny-llama")
    opts = options("--ranks", "2", "--launch-backend", "ring", "--model", "synthetic:tiny-llama")
    assert (opts.ranks, opts.launch_backend) == (2, "ring")
    opts = options("--open", str(RANK_DIR))
    assert opts.open_paths == [RANK_DIR] and opts.recordings_dir == RANK_DIR  # Sessions lists the run's files
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no recordings in"):
        options("--open", str(tmp_path / "empty"))


def test_stepping_lands_on_the_rank_snapshot_it_names(tmp_path):
    """``]`` moves the shared cursor to the pool rank's next snapshot (rank 1 started 0.5 s late, its clock 12.3 us
    off: its own 7.5 s is 8.0000123 s on rank 0's clock). Mapped back through the clock, that instant rounds to
    just below 7.5 s in floating point: the pool views must still show the snapshot taken at 7.5 s, not the one
    before it."""
    directory = write_rank_run(tmp_path / "ranks", shift=0.5, backends=("slab",), offset=1.234567e-5)

    async def go():
        app = replay_app([directory], tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await show(pilot, "2", "w")
            app.post_message(Scrubber.Seek(7.8))
            await settle(pilot)
            await show(pilot, "right_square_bracket")
            return app, app.frame().snapshot()

    app, shown = run(go())
    r1 = app.store.sessions["slab r1"]
    assert app.cursor == app.store.to_shared(r1, 7.5) and 7.5 in r1.snapshot_times()
    assert app.store.runs[0].clocks[1].from_reference(app.cursor) < 7.5  # the round trip's rounding
    assert r1.snapshot_at(7.5) != r1.snapshot_at(7.4)
    assert shown == (app.cursor, r1.snapshot_at(7.5))


def test_two_runs_of_one_backend_keep_apart(tmp_path):
    first = write_rank_run(tmp_path / "a", backends=("slab",))
    second = tmp_path / "b"
    second.mkdir()
    for rank in (0, 1):
        write_rank(second / f"x-slab-rank{rank}.slabrec", "slab", rank, run_id="other")

    async def go():
        app = replay_app([first, second], tmp_path)
        async with app.run_test(size=(130, 40)) as pilot:
            await settle(pilot)
            return app, await show(pilot, "8")

    app, text = run(go())
    other = "slab@" + app.store.runs[1].run_id[:6]  # its run id ("other-slab") tells it apart
    assert list(app.store.sessions) == ["slab r0", "slab r1", f"{other} r0", f"{other} r1"]
    assert [r.label for r in app.store.runs] == ["slab", other] and other == "slab@other-"
    assert f"{other}: 2 ranks via mlx.launch (ring)" in text


def test_a_rank_whose_file_is_damaged_says_so_not_that_it_died(tmp_path):
    """A rank file corrupted in the middle is read up to its damage; the Ranks view called it "died: recording never
    closed" (the END was past the damage), which was false. It says what ``describe_run`` says: damaged, and where."""
    directory = tmp_path / "ranks"
    directory.mkdir()
    write_rank(directory / "x-slab-rank0.slabrec", "slab", 0)
    damaged = directory / "x-slab-rank1.slabrec"
    write_rank(damaged, "slab", 1)
    blob = bytearray(damaged.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte: a checksum mismatch with valid records after it
    damaged.write_bytes(bytes(blob))

    async def go():
        app = replay_app([directory], tmp_path)
        async with app.run_test(size=(130, 40)) as pilot:
            await settle(pilot)
            return app, await show(pilot, "8")

    app, text = run(go())
    assert app.store.sessions["slab r1"].damage is not None
    assert "r1 ✗" in text and "damaged file (read up to byte" in text and "never closed" not in text
