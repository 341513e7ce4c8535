"""``whatif --max-buffer``: the fit answers agree with the limit flags printed under them. A pool whose slab (or
monolithic tensor) at the what-if peak exceeds the device's largest buffer cannot be allocated, so it fits at no
memory size ("fits? yes" beside "it cannot be allocated" was the finding); 0 bytes is refused as a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.replay import Session
from probes.sizing import buffer_flags, fit_table, footprint_model, pool_timeline

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "sample-churn-slab.slabrec"
GIB = 2**30


@pytest.fixture(scope="module")
def sized():
    session = Session.open(SAMPLE)
    timeline = pool_timeline(session)
    return timeline, footprint_model(session, timeline)


def _peak_slab_bytes(timeline) -> int:
    cfg = timeline.cfg
    return cfg.slab_blocks * timeline.bytes_per_row // 2  # one slab's K (or V)


def test_fits_agrees_with_the_buffer_flag_on_both_sides_of_the_peak_slab(sized):
    timeline, model = sized
    slab = _peak_slab_bytes(timeline)
    for max_buffer in (1, slab - 1, slab, slab + 1, 64 * GIB, None):
        rows = fit_table(model, timeline, [16 * GIB, 128 * GIB], max_buffer)
        unallocatable = any(flag.endswith("cannot be allocated")
                            for flag in buffer_flags(timeline, timeline.whatif_peak_capacity, max_buffer, "peak"))
        assert unallocatable == (max_buffer is not None and max_buffer < slab)
        for row in rows:
            assert row.fits == (not unallocatable), (max_buffer, row)
            assert ("largest allocation" in row.why_not) == unallocatable
            if unallocatable:
                assert row.largest_batch == 0 and row.largest_context == 0


def test_fits_still_says_no_for_memory_and_why(sized):
    _, model = sized
    timeline = sized[0]
    (row,) = fit_table(model, timeline, [model.need_peak - 1], None)
    assert not row.fits and row.why_not.startswith("the modelled peak")


def test_cli_a_buffer_below_the_slab_fits_nowhere_and_says_why(cli, sized):
    slab = _peak_slab_bytes(sized[0])
    code, out, err = cli(["whatif", str(SAMPLE), "--max-buffer", str(slab - 1)])
    assert code == 0, err
    table = [line.split() for line in out.splitlines() if line.strip().startswith(("16 GiB", "128 GiB"))]
    assert [cells[2] for cells in table] == ["no", "no"]
    assert "  does not fit at any size: at the what-if peak: one slab" in out
    assert "FLAG at the what-if peak: one slab" in out and "it cannot be allocated" in out
    code, out, _ = cli(["whatif", str(SAMPLE), "--max-buffer", str(slab - 1), "--json"])
    fit = json.loads(out)["sizing"]["fit"]
    assert code == 0 and [row["fits"] for row in fit] == [False] * 4
    assert all("largest allocation" in row["why_not"] for row in fit)


def test_cli_a_buffer_that_holds_the_slab_fits(cli, sized):
    code, out, _ = cli(["whatif", str(SAMPLE), "--max-buffer", str(_peak_slab_bytes(sized[0])), "--json"])
    assert code == 0 and [row["fits"] for row in json.loads(out)["sizing"]["fit"]] == [True] * 4


@pytest.mark.parametrize("value", ["0", "0G", "0.0001"])
def test_cli_a_zero_byte_buffer_is_a_usage_error(cli, value):
    code, out, err = cli(["whatif", str(SAMPLE), "--max-buffer", value])
    assert code == 2 and out == "" and len(err) == 1 and "must be at least 1 byte" in err[0]
