"""`bench decode` on a cell its route cannot run (the per-slab route past its slab-input limit, seen on the H200 at
1,024 slabs): the cell is said in one line and listed under "refused", the other cells still print; no traceback.
The measurement itself needs a GPU: a stand-in ``measure_cell`` refuses one cell (no mlx kernel runs here)."""

from __future__ import annotations

import json

import app.commands.bench_decode as bench_decode
import pool.fused_decision
from pool.kernels.plan import KernelUnsupported


def _cell(args, mx, backend, batch, context, tuning):
    if context == 16384:
        raise KernelUnsupported("1024 slabs above the kernel's 512 slab inputs")
    return {"batch": batch, "context": context, "slabs": 8, "gather_us": 100.0, "fused_us": 10.0, "sdpa_us": 9.0,
            "gbps_fused": 1.0, "gbps_sdpa": 1.0, "route": "per-slab inputs"}


def test_a_cell_the_route_cannot_run_is_said_and_the_others_still_print(cli, monkeypatch, tmp_path):
    monkeypatch.setattr(pool.fused_decision, "detect_backend", lambda: "cuda")
    monkeypatch.setattr(bench_decode, "measure_cell", _cell)
    out = tmp_path / "decode.json"
    code, _, err = cli(["bench", "decode", "--batches", "16", "--contexts", "8192,16384", "--out", str(out)])
    assert code == 0 and not [line for line in err if "Traceback" in line]
    assert "B=16 context=16384: the fused kernel cannot run this cell: 1024 slabs above the kernel's 512 slab inputs" \
        in err
    result = json.loads(out.read_text())
    assert [(r["batch"], r["context"]) for r in result["rows"]] == [(16, 8192)]
    assert result["refused"] == [{"batch": 16, "context": 16384,
                                  "reason": "1024 slabs above the kernel's 512 slab inputs"}]
