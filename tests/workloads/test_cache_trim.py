"""MLX's cache as a run parameter and the prefill cache trim: the limit reaches every backend's spec alike and
the run's meta; the trim releases the cache between prefill chunks only above its budget; neither changes a
single logit (byte-identical with the trim off)."""

from __future__ import annotations

import argparse

import pytest

from probes.events import MetaUpdate

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

BURST = burst_toml(n=2, concurrency=2, prompt_tokens="[40, 70]", gen_tokens="[3, 5]")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)


def test_trim_releases_the_cache_only_above_budget():
    import mlx.core as mx

    from app.workloads.cache_trim import CacheTrim

    def fill_cache():
        parts = [mx.ones((64,)) + i for i in range(16)]  # small buffers stay in MLX's cache even on the CPU
        mx.eval(parts)
        del parts

    fill_cache()
    assert mx.get_cache_memory() > 0
    generous = CacheTrim(weight_bytes=1 << 40, bytes_per_token=0, min_bytes=0)
    assert not generous.after_prefill_chunk(0) and generous.trims == 0 and mx.get_cache_memory() > 0
    off = CacheTrim(weight_bytes=0, bytes_per_token=0, fraction=None, min_bytes=0)
    floor = CacheTrim(weight_bytes=0, bytes_per_token=0)  # default floor: a small cache is never worth a trim
    assert not floor.after_prefill_chunk(0) and floor.budget(0) == 64 * 2**20
    assert not off.after_prefill_chunk(0) and mx.get_cache_memory() > 0
    strict = CacheTrim(weight_bytes=0, bytes_per_token=0, min_bytes=0)
    assert strict.after_prefill_chunk(10) and strict.trims == 1 and mx.get_cache_memory() == 0
    assert strict.summary()["trimmed_bytes"] > 0
    assert CacheTrim(weight_bytes=100, bytes_per_token=10, fraction=0.5, min_bytes=0).budget(10) == 100


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_trim_and_cache_limit_change_no_logit_and_are_reported(tiny_llama, tmp_path, backend, monkeypatch):
    import mlx.core as mx

    import app.workloads.cache_trim as cache_trim

    monkeypatch.setattr(cache_trim, "MIN_TRIM_BYTES", 0)  # a tiny run's cache is small: trim it anyway
    scenario = write_scenario(tmp_path, BURST)
    pool = POOL if backend != "dense" else {}
    previous = mx.set_cache_limit(1 << 20)
    mx.set_cache_limit(previous)
    try:
        trimmed, events, logits = run_backend(tiny_llama, scenario, backend, prefill_trim=0.0, cache_limit=1 << 30,
                                               **pool)
        applied = mx.set_cache_limit(previous)  # what the run left in force: its own limit
        plain, _, plain_logits = run_backend(tiny_llama, scenario, backend, prefill_trim=None, **pool)
    finally:
        mx.set_cache_limit(previous)
    assert applied == 1 << 30
    assert_same_logits(logits, plain_logits, f"{backend}: trim + cache limit vs neither")
    assert trimmed["cache_trim"]["fraction"] == 0.0 and plain["cache_trim"] == {"fraction": None, "trims": 0,
                                                                                   "trimmed_bytes": 0}
    prefill_steps = sum(p["prefill_steps"] for p in trimmed["phases"].values())
    assert 1 <= trimmed["cache_trim"]["trims"] <= prefill_steps
    meta = next(e.meta for e in events if isinstance(e, MetaUpdate))
    assert meta["mlx_cache"]["limit_bytes"] == 1 << 30 and meta["spec"]["cache_limit"] == 1 << 30
    assert meta["mlx_cache"]["prefill_trim_fraction"] == 0.0


def test_record_applies_one_cache_limit_to_every_backend(tmp_path):
    from app.commands import record
    from app.commands.record_specs import run_specs

    parser = argparse.ArgumentParser()
    record.add_parser(parser.add_subparsers())
    args = parser.parse_args(["record", "--out", str(tmp_path), "--backends", "slab,dense,monolithic",
                              "--cache-limit", "512M", "--prefill-trim", "off", "--model", "synthetic:tiny-llama"])
    specs = run_specs(args, ["slab", "dense", "monolithic"])
    assert {s.cache_limit for s in specs} == {512 * 2**20} and {s.prefill_trim for s in specs} == {None}


@pytest.mark.parametrize("text, value", [("0", 0), ("1048576", 2**20), ("512M", 512 * 2**20), ("2g", 2 * 2**30),
                                         ("1.5GiB", int(1.5 * 2**30)), ("64KB", 64 * 2**10)])
def test_byte_sizes(text, value):
    from app.commands.arg_types import byte_size

    assert byte_size(text) == value


@pytest.mark.parametrize("text", ["-1", "lots", "", "G"])
def test_bad_byte_sizes_are_usage_errors(text):
    from app.commands.arg_types import byte_size

    with pytest.raises(argparse.ArgumentTypeError):
        byte_size(text)


def test_bad_cache_parameters_are_refused():
    from app.workloads.spec import RunSpec

    with pytest.raises(ValueError, match="cache_limit"):
        RunSpec(cache_limit=-1)
    with pytest.raises(ValueError, match="prefill_trim"):
        RunSpec(prefill_trim=-0.5)


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_the_trim_budget_counts_the_running_sequences_final_lengths(tiny_llama, tmp_path, backend, monkeypatch):
    """Asked before every prefill chunk with the K/V the running sequences will hold at their final lengths (the
    run's peak), not with what is cached so far: early chunks must not trim for a footprint the end exceeds."""
    from app.workloads.cache_trim import CacheTrim

    asked = []
    monkeypatch.setattr(CacheTrim, "due", lambda self, tokens: asked.append(tokens) or False)
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="48", gen_tokens="4"))
    summary, _, _ = run_backend(tiny_llama, scenario, backend, **(POOL if backend != "dense" else {}))
    prefill_steps = sum(p["prefill_steps"] for p in summary["phases"].values())
    assert asked == [2 * (48 + 4 - 1)] * prefill_steps  # both admitted at once: one projection for every chunk
