"""The prefill chunk rule (pool/prefill_policy.py) and where runs take it from (``resolved_pool_params``)."""

from __future__ import annotations

import pytest

from app.workloads.spec import RunSpec, resolved_pool_params
from pool.prefill_policy import ENV_VAR, prefill_chunk_for


def test_rule_raises_a_suggestion_to_one_slab_in_whole_suggestions():
    assert prefill_chunk_for(256, pinned=False, block_size=32, slab_blocks=32) == 1024
    assert prefill_chunk_for(384, pinned=False, block_size=32, slab_blocks=32) == 1152
    assert prefill_chunk_for(2048, pinned=False, block_size=32, slab_blocks=32) == 2048
    assert prefill_chunk_for(256, pinned=True, block_size=32, slab_blocks=32) == 256


def test_runs_take_the_rule_only_when_switched_on_and_not_pinned(monkeypatch):
    churn = {"prefill_chunk": 256}
    assert resolved_pool_params(RunSpec(), churn)["prefill_chunk"] == 256
    monkeypatch.setenv(ENV_VAR, "slab")
    assert resolved_pool_params(RunSpec(), churn)["prefill_chunk"] == 1024
    assert resolved_pool_params(RunSpec(prefill_chunk=128), churn)["prefill_chunk"] == 128
    monkeypatch.setenv(ENV_VAR, "bogus")
    with pytest.raises(ValueError, match=ENV_VAR):
        resolved_pool_params(RunSpec(), churn)
