"""Every shipped recording (assets/recordings/**) shows the what-if figures and rebuilt pools it showed at commit
5241d86, the last commit whose bookkeeping kept one block table per layer.

The expected values in ``shipped_whatif.json`` were printed by 5241d86's own code (``lab/shipped_whatif/capture.py``
run with that tree on ``PYTHONPATH``; its docstring has the command): ``slabscope whatif --json`` under seven
geometries and shrink policies (the recorded one, 8- and 64-block slabs, 16-token blocks, the monolithic design,
compact with a 1 MiB budget, release), and for every recorded snapshot instant the snapshot ``snapshot_at``
rebuilds, as headline figures and a digest of its canonical form (every figure, layer 0's row arrays, the sequences'
rows, and whether every layer holds the same rows). A dense recording's what-if is its one-line refusal.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "assets" / "recordings"
EXPECTED = json.loads((Path(__file__).with_name("shipped_whatif.json")).read_text())
VARIANTS = {"recorded": [], "slab8": ["--slab-blocks", "8"], "slab64": ["--slab-blocks", "64"],
            "block16": ["--block-size", "16"], "monolithic": ["--design", "monolithic"],
            "compact": ["--shrink", "compact", "--shrink-budget", "1M"], "release": ["--shrink", "release"]}


# Fields what-if's JSON gained after 5241d86 (no figure of that commit changed): a fit row's ``why_not`` (the
# reason a pool fits at no size: the largest-buffer check, issue 23). Compared without them; their own tests are in
# tests/probes/test_whatif_max_buffer.py.
ADDED_FIT_FIELDS = ("why_not",)
# What-if figures issue 27 added (slabs over all layers, decode steps found) or redefined as ``probes.figures``
# defines them for every surface (gather runs: per sequence per decode step, where 5241d86 counted every live
# sequence at every snapshot instant). Compared without them here; tests/probes/test_same_figures.py holds what-if's
# gather runs and slabs to compare's and the TUI's, and test_figures.py each definition to its measured value.
REDEFINED_WHATIF_FIELDS = ("max_slabs", "final_slabs", "decode_steps", "gather_runs_hist", "mean_gather_runs",
                           "max_gather_runs")
# Byte sizes in the fit rows' sentences: printed by one formatter since issue 27 (``pool.units.format_bytes``: two
# decimals below 10, "11 GiB" not "11.0 GiB"); 5241d86 printed one decimal. Compared as numbers, each to its
# printed precision.
SIZE = re.compile(r"(\d[\d,]*(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)\b")
# Pool counters added after 5241d86 (issue 26: gathered bytes and prefill routes): a recording made before them
# reads None there (not recorded), checked, then left out of the digest.
ADDED_COUNTER_FIELDS = ("prefill_bytes_gathered", "decode_bytes_gathered", "prefill_bytes_gathered_model",
                        "decode_bytes_gathered_model", "prefill_paged_decisions", "prefill_gather_decisions")


def _whatif(path: Path, flags: list[str]) -> dict:
    from app.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(["whatif", "--json", str(path), *flags])
    parsed = json.loads(out.getvalue()) if rc == 0 else None
    for row in (parsed or {}).get("sizing", {}).get("fit", []):
        for field in ADDED_FIT_FIELDS:
            row.pop(field, None)
    return _without_redefined({"rc": rc, "out": parsed, "err": err.getvalue().strip().replace(str(path), "PATH")})


def _without_redefined(output: dict) -> dict:
    """``output`` (a copy) without ``REDEFINED_WHATIF_FIELDS`` in its what-if and recorded summaries."""
    output = copy.deepcopy(output)
    for part in ("whatif", "recorded"):
        for field in REDEFINED_WHATIF_FIELDS:
            (output.get("out") or {}).get(part, {}).pop(field, None)
    return output


def _same_sizes(got: dict, expected: dict) -> dict:
    """``got`` with every fit sentence that reads ``expected``'s sizes (to the coarser of the two printed
    precisions) replaced by ``expected``'s sentence; a sentence that differs in any other word, or in a size, is
    left as it is (and the comparison fails on it)."""
    fits = zip((got.get("out") or {}).get("sizing", {}).get("fit", []),
               (expected.get("out") or {}).get("sizing", {}).get("fit", []))
    for row, old in fits:
        for key in ("batch_limit", "context_limit"):
            if isinstance(row.get(key), str) and isinstance(old.get(key), str) and _sizes_agree(row[key], old[key]):
                row[key] = old[key]
    return got


def _sizes_agree(new: str, old: str) -> bool:
    if SIZE.sub("<size>", new) != SIZE.sub("<size>", old):
        return False
    pairs = zip(SIZE.findall(new), SIZE.findall(old))
    return all(unit_a == unit_b and abs(float(a.replace(",", "")) - float(b.replace(",", ""))) <= _half_unit(a)
               + _half_unit(b) for (a, unit_a), (b, unit_b) in pairs)


def _half_unit(printed: str) -> float:
    """Half the last printed digit's unit: how far the printed number may be from the value it rounds."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10 ** -decimals


def _slim(output: dict) -> dict:
    if output["out"] is not None:
        del output["out"]["recorded"], output["out"]["sizing"]["recorded_config"]
    return output


def canonical(snap) -> dict:
    """A rebuilt snapshot as plain data, independent of how the snapshot type stores its row arrays."""
    layers = snap.layers
    owner, refcount = _row_arrays(snap)
    counters = snap.counters.to_dict()
    for field in ADDED_COUNTER_FIELDS:
        assert counters.pop(field) is None, f"{field}: a shipped recording predates it and must read None"
    return {"head": [snap.design, snap.block_size, snap.slab_blocks, snap.num_layers, snap.dtype, snap.n_kv_heads,
                     snap.head_dim, snap.bytes_per_row],
            "stats": snap.stats.to_dict(), "counters": counters,
            "layers": [[layer.num_chunks, layer.capacity_rows, layer.free_rows, layer.holes, layer.largest_free_run,
                        layer.fragmentation, [list(item) for item in sorted(layer.gather_runs_hist.items())],
                        layer.fused.use_fused, layer.fused.reason] for layer in layers],
            "row_owner": owner, "row_refcount": refcount, "every_layer_same_rows": _same_rows(snap),
            "seq_rows": sorted([seq, rows] for seq, rows in (snap.seq_rows or {}).items())}


def _row_arrays(snap) -> tuple[list[int], list[int]]:
    """The pool's row owners and refcounts (held once: every layer holds the same rows; 5241d86's snapshot held a
    copy per layer, and its canonical form took layer 0's)."""
    return snap.row_owner, snap.row_refcount


def _same_rows(snap) -> bool:
    """Every layer holds the same rows: one capacity for all, one set of row arrays (5241d86 compared the copies)."""
    return snap.row_owner is not None and all(layer.capacity_rows == snap.layers[0].capacity_rows
                                              for layer in snap.layers)


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_recording_gives_the_whatif_figures_it_gave_before(name):
    expected = {key: _without_redefined(value) for key, value in EXPECTED[name]["whatif"].items()}
    path = ROOT / name
    assert _same_sizes(json.loads(json.dumps(_whatif(path, []))), expected["recorded"]) == expected["recorded"]
    for key, flags in VARIANTS.items():
        if flags and key in expected:
            got = _same_sizes(json.loads(json.dumps(_slim(_whatif(path, flags)))), expected[key])
            assert got == expected[key], key


@pytest.mark.parametrize("name", sorted(name for name, entry in EXPECTED.items() if "rebuilt" in entry))
def test_shipped_recording_rebuilds_the_pools_it_rebuilt_before(name):
    from probes.replay import Session

    session = Session.open(ROOT / name)
    got = []
    for record in session.snapshots:
        snap = session.snapshot_at(record.t)
        if snap is None:
            got.append(None)
            continue
        form = canonical(snap)
        got.append([record.t, snap.stats.live_blocks, snap.stats.bytes_reserved, snap.layers[0].num_chunks,
                    form["every_layer_same_rows"], _digest(form)])
    assert json.loads(json.dumps(got)) == EXPECTED[name]["rebuilt"]


def test_every_shipped_recording_is_covered():
    shipped = {str(path.relative_to(ROOT)) for path in ROOT.rglob("*.slabrec")}
    assert shipped == set(EXPECTED)
