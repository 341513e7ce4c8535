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


# ---- the footprint figure the gate reads: max(active + cache) in the phase's own window -------------------------
def _recording(path, backend: str, phases: dict[str, list[tuple[int, int, int]]]) -> str:
    """A session whose samples are (active, cache, MLX peak) per phase, one phase after another, 0.1 s apart;
    ``footprint`` is active + cache as the sampler writes it, ``footprint_max`` its running max since start."""
    from probes.events import PhaseEdge, Sample
    from probes.recording import SessionRecorder

    t0 = 100.0
    rec = SessionRecorder(path, {"backend": backend, "scenario": "gates"}, t0)
    t, running = t0, 0
    for name, readings in phases.items():
        events = [PhaseEdge(name=name, edge="start", t=t)]
        for active, cache, peak in readings:
            t += 0.1
            running = max(running, active + cache)
            events.append(Sample(t=t, step=0, tokens=0, active=active, cache=cache, footprint=active + cache,
                                 peak=peak, footprint_max=running, rss=active + cache, rss_max=running,
                                 sys_available=0, weights=0, pool_live=0, pool_free=0, other_active=active,
                                 rss_other=0, cost_us=0.0))
        events.append(PhaseEdge(name=name, edge="end", t=t + 0.05))
        t += 0.1
        rec.write(events)
    rec.close({}, t=t)
    return str(path)


def test_the_footprint_gate_reads_max_active_plus_cache_per_phase_not_mlx_peak(tmp_path, capsys):
    """The candidate's phase "b" holds 50 MB active + 70 MB cache (MLX's peak counter says 60 MB: it misses the
    buffer cache); the dense baseline's "b" peaks at 100 MB. Ratio 1.2 > 1.15: the gate fails. Read from the peak
    column the ratio would be 0.6 and pass; read from the running max since start (``footprint_max``), phase "b"
    would inherit phase "a"'s 300 MB."""
    import json

    from app.cli import main as cli_main

    MB = 10**6
    base = _recording(tmp_path / "base.slabrec", "dense",
                      {"a": [(300 * MB, 0, 300 * MB)], "b": [(90 * MB, 10 * MB, 100 * MB), (80 * MB, 0, 90 * MB)]})
    slab = _recording(tmp_path / "slab.slabrec", "slab",
                      {"a": [(300 * MB, 0, 300 * MB)], "b": [(50 * MB, 70 * MB, 60 * MB), (40 * MB, 10 * MB, 60 * MB)]})
    assert cli_main(["compare", base, slab, "--json"]) == 0
    rows = {(r["session"], r["phase"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[("slab", "b")]["footprint_max"] == 120 * MB and rows[("dense", "b")]["footprint_max"] == 100 * MB
    assert rows[("slab", "b")]["footprint_ratio"] == 1.2 and rows[("slab", "a")]["footprint_ratio"] == 1.0
    assert cli_main(["compare", base, slab, "--max-ratio", "1.15"]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED" in out and "slab [b]: footprint ratio 1.200 > 1.15" in out
    assert "slab [a]" not in out.split("GATE FAILED", 1)[1]
