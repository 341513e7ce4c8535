"""Where a decode step's token writes land: with the pool's open blocks at the top of the reservation (``--open-blocks``
auto/high: pool/config.py), a burst's first decode step (the last prompt token of every sequence) and the steps after
it write one slab per layer; with "low", the first step writes one slab per sequence (each prompt's last block sat in
the slab that prompt filled): the B scatters per layer that made the H200's first decode step slow
(docs/measurements-log.md).
Logits are byte-identical either way."""

from __future__ import annotations

import pytest

from pool.pool import PagedKVPool

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

# 4 sequences of 32-token prompts: 8 blocks of 4 tokens each, one slab of 8 rows per sequence; final length 37 tokens
# (10 blocks), so the reservation is exactly 5 slabs and its top slab holds every open block
BURST = dict(n=4, concurrency=4, prompt_tokens="32", gen_tokens="6")


def _run_slabs(loaded, scenario, monkeypatch, **spec_fields):
    """Run the burst; returns (summary, logits, pool's open_blocks, [slabs written per decode step, layer 0])."""
    written, policies = [], []
    original = PagedKVPool.write_slots

    def spy(self, seq_ids, starts, num_tokens):
        slots = original(self, seq_ids, starts, num_tokens)
        if num_tokens == 1 and len(seq_ids) > 1:  # a batched decode step
            policies.append(self.config.open_blocks)
            written.append(sorted({rows[0] // self.config.slab_blocks for rows in slots.rows}))
        return slots

    monkeypatch.setattr(PagedKVPool, "write_slots", spy)
    summary, _, logits = run_backend(loaded, scenario, "slab", block_size=4, slab_blocks=8, prefill_chunk=16,
                                     **spec_fields)
    monkeypatch.undo()
    return summary, logits, set(policies), written


@pytest.mark.numerics
def test_every_decode_step_of_a_burst_writes_one_slab(tiny_llama, tmp_path, monkeypatch):
    scenario = write_scenario(tmp_path, burst_toml(**BURST))
    auto = _run_slabs(tiny_llama, scenario, monkeypatch)
    low = _run_slabs(tiny_llama, scenario, monkeypatch, open_blocks="low")
    assert auto[2] == {"high"} and low[2] == {"low"}
    assert len(auto[3]) == 6 and all(len(slabs) == 1 for slabs in auto[3]), auto[3]
    assert low[3][0] == [0, 1, 2, 3]  # the first step: the last prompt token of each sequence, in its own slab
    assert_same_logits(auto[1], low[1], "open blocks high vs low")
    dense = run_backend(tiny_llama, scenario, "dense", block_size=4, slab_blocks=8, prefill_chunk=16)
    assert_same_logits(auto[1], dense[2], "slab (open blocks high) vs dense")


@pytest.mark.parametrize(("backend", "shrink", "expected"), [("slab", "off", "high"), ("slab", "release", "low"),
                                                            ("monolithic", "off", "low")])
def test_auto_asks_for_high_only_where_the_pool_reserves_ahead(backend, shrink, expected):
    from app.workloads.spec import RunSpec

    spec = RunSpec(backend=backend, shrink=shrink)
    assert spec.pool_open_blocks() == expected
    assert spec.reserves_ahead() == (expected == "high")
    assert RunSpec(backend=backend, shrink=shrink, open_blocks="low").pool_open_blocks() == "low"


def test_an_unknown_open_blocks_is_a_one_line_error():
    from app.workloads.spec import RunSpec

    with pytest.raises(ValueError, match="unknown open_blocks 'top' \\(choose one of auto, low, high\\)"):
        RunSpec(open_blocks="top")
