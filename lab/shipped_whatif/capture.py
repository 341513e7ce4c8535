"""Capture what every shipped recording shows through the what-if replay and the rebuild, as plain data.

Run it with the tree whose figures are the reference on ``PYTHONPATH`` (the figures in
tests/probes/shipped_whatif.json came from commit 5241d86, before the one-row-space bookkeeping):

    git archive 5241d86 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python lab/shipped_whatif/capture.py > tests/probes/shipped_whatif.json

For every ``assets/recordings/**/*.slabrec`` it records ``slabscope whatif --json`` (exit code and stdout, or the
one-line error); for pool recordings also under each other variant of ``VARIANTS`` (less what the recorded
variant already holds), and for pool recordings the canonical form
(``tests/probes/test_shipped_whatif.py``'s ``canonical``) of the snapshot rebuilt at every recorded snapshot instant,
as a SHA-256 digest beside its headline figures.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"recorded": [], "slab8": ["--slab-blocks", "8"], "slab64": ["--slab-blocks", "64"],
            "block16": ["--block-size", "16"], "monolithic": ["--design", "monolithic"],
            "compact": ["--shrink", "compact", "--shrink-budget", "1M"], "release": ["--shrink", "release"]}


def whatif(path: Path, flags: list[str]) -> dict:
    from app.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(["whatif", "--json", str(path), *flags])
    return {"rc": rc, "out": json.loads(out.getvalue()) if rc == 0 else None,
            "err": err.getvalue().strip().replace(str(path), "PATH")}


def slim(output: dict) -> dict:
    """A variant's output without what the "recorded" variant already holds (the recorded configuration's replay)."""
    if output["out"] is not None:
        del output["out"]["recorded"], output["out"]["sizing"]["recorded_config"]
    return output


def canonical(snap) -> dict:
    """A rebuilt snapshot as plain data that does not depend on how the snapshot stores its row arrays."""
    layers = snap.layers
    return {"head": [snap.design, snap.block_size, snap.slab_blocks, snap.num_layers, snap.dtype, snap.n_kv_heads,
                     snap.head_dim, snap.bytes_per_row],
            "stats": snap.stats.to_dict(), "counters": snap.counters.to_dict(),
            "layers": [[layer.num_chunks, layer.capacity_rows, layer.free_rows, layer.holes, layer.largest_free_run,
                        layer.fragmentation, sorted(layer.gather_runs_hist.items()), layer.fused.use_fused,
                        layer.fused.reason] for layer in layers],
            "row_owner": layers[0].row_owner, "row_refcount": layers[0].row_refcount,
            "every_layer_same_rows": all(layer.row_owner == layers[0].row_owner
                                         and layer.row_refcount == layers[0].row_refcount for layer in layers),
            "seq_rows": sorted((seq, rows) for seq, rows in (snap.seq_rows or {}).items())}


def digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def rebuilt(path: Path) -> list:
    from probes.replay import Session

    session = Session.open(path)
    out = []
    for record in session.snapshots:
        snap = session.snapshot_at(record.t)
        if snap is None:
            out.append(None)
            continue
        form = canonical(snap)
        out.append([record.t, snap.stats.live_blocks, snap.stats.bytes_reserved, snap.layers[0].num_chunks,
                    form["every_layer_same_rows"], digest(form)])
    return out


def main() -> int:
    result = {}
    for path in sorted((ROOT / "assets" / "recordings").rglob("*.slabrec")):
        name = str(path.relative_to(ROOT / "assets" / "recordings"))
        recorded = whatif(path, [])
        entry = {"whatif": {"recorded": recorded}}
        if recorded["rc"] == 0:  # a pool recording: every variant, and the rebuilt snapshots
            entry["whatif"].update({key: slim(whatif(path, flags)) for key, flags in VARIANTS.items() if flags})
            entry["rebuilt"] = rebuilt(path)
        result[name] = entry
    json.dump(result, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
