"""The pool facade fuzz (tests/pool/pool_fuzz.py) at CI size; ``make fuzz`` runs it SLABSCOPE_FUZZ_SCALE times
longer and prints the outcome counts by class."""

from __future__ import annotations

import os

import pytest

from pool_fuzz import run_fuzz, shrink_policy

SCALE = int(os.environ.get("SLABSCOPE_FUZZ_SCALE", "1"))
STEPS = 300 * SCALE


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 6, 7])
@pytest.mark.parametrize("design", ["slab", "monolithic"])
@pytest.mark.parametrize("open_blocks", ["low", "high"])
def test_random_valid_and_invalid_calls(design, seed, open_blocks):
    counts = run_fuzz(seed, design, STEPS, open_blocks)
    invalid_kinds = [k for k in counts if k.startswith("invalid:")]
    limited = sum(n for k, n in counts.items() if k.startswith("limit:"))
    print(f"\npool fuzz {design} (open blocks {open_blocks}) seed {seed}: {counts['cases']} cases: "
          f"{counts['identical']} identical to the dense reference, {counts['clear error']} clear errors with the "
          f"state unchanged ({len(invalid_kinds)} kinds of invalid call; {limited} valid calls refused by the budget "
          f"or the memory limit; shrink {shrink_policy(seed).mode}: {counts['shrink:moved']} row moves, "
          f"{counts['shrink:released']} slabs released)")
    assert counts["identical"] + counts["clear error"] >= STEPS
    assert counts["identical"] > STEPS // 4 and counts["clear error"] > STEPS // 4
    if shrink_policy(seed).mode != "off" and design == "slab":
        # the policy really ran (a monolithic fuzz pool rarely spans two 32-row grow chunks: its release and
        # allocate-smaller-and-copy are pinned by tests/pool/test_pool_shrink.py instead)
        assert counts["shrink:released"] > 0
        if shrink_policy(seed).mode == "compact" and shrink_policy(seed).budget_bytes:
            assert counts["shrink:moved"] > 0
