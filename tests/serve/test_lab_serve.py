"""lab/serve_h200's summary (no servers): median and range per scenario and server over the rounds' runs, a run
that failed or whose server failed named under its row, figures a run did not get left out."""

from __future__ import annotations

from lab.serve_h200.bench import summarize, table


def test_median_and_range_per_scenario_and_server_and_failures_named():
    rows = [{"scenario": "burst", "server": "slab", "output_tok_s": v, "footprint_mib": f, "verdict": "ok: 4 of 4"}
            for v, f in ((10.0, 5.0), (30.0, 7.0), (20.0, 6.0))]
    rows.append({"scenario": "burst", "server": "mlx_lm.server", "output_tok_s": 5.0,
                 "verdict": "server failed: the server ran out of memory (...): 3 of 4 requests failed"})
    rows.append({"scenario": "burst", "server": "mlx_lm.server", "error": "RuntimeError: server exited with -9"})
    summary = summarize(rows)
    slab = summary["burst"]["slab"]
    assert slab["runs"] == 3 and slab["output_tok_s"] == {"median": 20.0, "min": 10.0, "max": 30.0}
    assert slab["footprint_mib"] == {"median": 6.0, "min": 5.0, "max": 7.0} and "tpot_p50_ms" not in slab
    other = summary["burst"]["mlx_lm.server"]
    assert other["runs"] == 2 and other["output_tok_s"]["median"] == 5.0
    text = table(summary)
    assert "20.0 [10-30]" in text and "not ok: server failed: the server ran out of memory" in text
