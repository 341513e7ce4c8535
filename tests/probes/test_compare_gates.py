"""`compare`'s gates say which figure of which row broke which limit, in words a CI log can be grepped for (the
mutants that changed these words or dropped the message survived every other test: docs/testing.md)."""

from __future__ import annotations

from probes.compare import Gates, PhaseRow, check_gates


def _row(session: str, phase: str, **figures) -> PhaseRow:
    base = dict(footprint_max=1.0, rss_max=1.0, footprint_ratio=None, tokens_per_s=None, throughput_ratio=None,
                max_slabs=None, max_fragmentation=None, mean_runs=None, max_runs=None, decline_rate=None)
    return PhaseRow(session=session, backend=session, phase=phase, **{**base, **figures})


def test_every_gate_names_its_figure_row_value_and_limit():
    rows = [_row("slab", "burst", footprint_ratio=1.3, max_fragmentation=0.6, mean_runs=3.25, decline_rate=0.5),
            _row("dense", "all", footprint_ratio=1.0)]
    gates = Gates(max_ratio=1.15, max_fragmentation=0.5, max_mean_runs=2.0, max_decline_rate=0.25)
    assert check_gates(rows, gates) == [
        "slab [burst]: footprint ratio 1.300 > 1.15",
        "slab [burst]: fragmentation 0.600 > 0.5",
        "slab [burst]: mean gather runs 3.250 > 2.0",
        "slab [burst]: fused decline rate 0.500 > 0.25",
    ]


def test_a_figure_at_its_limit_or_missing_passes_and_no_gate_checks_nothing():
    rows = [_row("slab", "all", footprint_ratio=1.15, max_fragmentation=None, mean_runs=2.0)]
    assert check_gates(rows, Gates(max_ratio=1.15, max_fragmentation=0.1, max_mean_runs=2.0)) == []
    assert check_gates([_row("slab", "all", footprint_ratio=9.0)], Gates()) == []
