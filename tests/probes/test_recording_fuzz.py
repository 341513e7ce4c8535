"""The recording fuzz (tests/probes/recording_fuzz.py) at CI size; ``make fuzz`` runs it SLABSCOPE_FUZZ_SCALE
times longer and prints the outcome counts by class."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from probes_helpers import write_synthetic
from test_probes_ranks import write_rank
from recording_fuzz import MUTATIONS, Base, FuzzTally, Mutator, make_bomb, record_spans, run_case

from probes.migrate import migrate
from probes.synthetic import write_synthetic_session

SCALE = int(os.environ.get("SLABSCOPE_FUZZ_SCALE", "1"))
CASES = 40 * SCALE  # per base file
SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "recordings"


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> list[Base]:
    """Valid recordings to damage, each with a donor (another session of the same format) to splice from: a pool
    session and a plain one (synthetic), the shipped churn recording (v1, and migrated to v2) and rank 0 of a
    two-rank run (compare merges it with an intact rank 1)."""
    folder = tmp_path_factory.mktemp("bases")
    write_synthetic_session(folder / "pool.slabrec", seconds=2.0, num_layers=2, keyframe_interval_s=0.5)
    write_synthetic_session(folder / "pool2.slabrec", seconds=2.0, num_layers=2, keyframe_interval_s=0.5, seed=1)
    write_synthetic(folder / "plain.slabrec", num_batches=6)
    write_rank(folder / "rank0.slabrec", rank=0, step_times=[0.5, 1.0, 1.5], clock_events=[(1.0, 0.0, 1e-4)])
    write_rank(folder / "rank1.slabrec", rank=1, step_times=[0.4, 0.9, 1.4], start_offset=0.2)
    write_synthetic(folder / "plain2.slabrec", num_batches=6)
    migrate(SHIPPED / "sample-churn-slab.slabrec", folder / "churn-v2.slabrec")
    migrate(SHIPPED / "sample-churn-dense.slabrec", folder / "churn-dense-v2.slabrec")
    pairs = {"v2-pool": ("pool", "pool2"), "v2-plain": ("plain", "plain2"), "v2-churn": ("churn-v2", "churn-dense-v2")}
    out = [Base(name, (folder / f"{a}.slabrec").read_bytes(), (folder / f"{b}.slabrec").read_bytes(), 2, 0)
           for name, (a, b) in pairs.items()]
    out.append(Base("v1-churn", (SHIPPED / "sample-churn-slab.slabrec").read_bytes(),
                    (SHIPPED / "sample-churn-dense.slabrec").read_bytes(), 1, 0))
    out.append(Base("v2-rank", (folder / "rank0.slabrec").read_bytes(), (folder / "rank1.slabrec").read_bytes(), 2,
                    0, partner=folder / "rank1.slabrec"))
    for base in out:
        base.records = len(record_spans(base.blob))
    return out


def test_damaged_recordings_give_a_clear_error_or_their_valid_prefix(bases, tmp_path):
    tally = FuzzTally()
    mutator = Mutator(random.Random(0), make_bomb())
    for index, base in enumerate(bases):
        rng = random.Random(1000 + index)
        mutator.rng = rng
        for case in range(CASES):
            mutation = MUTATIONS[case % len(MUTATIONS)] if case < len(MUTATIONS) else rng.choice(MUTATIONS)
            if mutation == "bomb" and case >= len(MUTATIONS) and SCALE == 1:
                mutation = "flip"  # one bomb per base in CI (each inflates 64 MiB)
            run_case(rng, base, mutation, mutator, tmp_path, tally, report=(case == 7))
    print(f"\nrecording fuzz: {tally.line()}")
    if SCALE > 1:
        for mutation in sorted({m for m, _ in tally.by_mutation}):
            counts = {outcome: n for (m, outcome), n in sorted(tally.by_mutation.items()) if m == mutation}
            print(f"  {mutation:22} {counts}")
        print("  accepted values (record kind: value):", dict(tally.accepted.most_common(12)))
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert tally.counts["clear error"] and tally.counts["prefix recovered"] and tally.counts["identical"]
