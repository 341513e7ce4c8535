"""The prefill in-flight bound: MLX's memory limit lowered to weights + the backend's K/V storage + the allowance
while a prefill chunk is encoded, and restored after (decode steps run under the limit in force); each backend
says what it holds; the bound changes no logit (byte-identical with it off) and is reported; bad values are
refused before anything runs."""

from __future__ import annotations

import argparse

import pytest

from probes.events import MetaUpdate

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

BURST = burst_toml(n=3, concurrency=3, prompt_tokens="[40, 70]", gen_tokens="[3, 5]")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)


def test_the_limit_is_lowered_while_encoding_and_restored_after():
    import mlx.core as mx

    from app.workloads.inflight_bound import InflightBound

    before = mx.get_memory_limit()
    bound = InflightBound(weight_bytes=1000, allowance=24)
    with bound.encoding(held_bytes=500):
        assert mx.get_memory_limit() == 1524
    assert mx.get_memory_limit() == before
    with pytest.raises(RuntimeError), bound.encoding(held_bytes=0):
        raise RuntimeError("a failed encoding still restores the limit")
    assert mx.get_memory_limit() == before
    huge = InflightBound(weight_bytes=before, allowance=1)
    with huge.encoding(held_bytes=1):
        assert mx.get_memory_limit() == before  # never raised above the limit in force
    off = InflightBound(weight_bytes=1000, allowance=None)
    with off.encoding(held_bytes=500):
        assert mx.get_memory_limit() == before
    assert bound.summary() == {"allowance_bytes": 24, "bounded_chunks": 2, "max_limit_bytes": 1524,
                               "layer_start_waits": 0}
    assert off.summary()["bounded_chunks"] == 0


@pytest.mark.parametrize("allowance", [-1, 1.5, True, "1G"])
def test_a_bad_allowance_is_refused(allowance):
    from app.workloads.inflight_bound import InflightBound
    from app.workloads.spec import RunSpec

    with pytest.raises(ValueError, match="allowance"):
        InflightBound(weight_bytes=0, allowance=allowance)
    with pytest.raises(ValueError, match="prefill_inflight"):
        RunSpec(prefill_inflight=allowance)


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_each_prefill_chunk_is_encoded_under_the_bound_and_no_logit_changes(tiny_llama, tmp_path, backend,
                                                                             monkeypatch):
    """Every prefill chunk's ``async_eval`` and each of its layer starts sees the limit weights + held + allowance,
    with ``held`` the backend's K/V storage at that moment (slab: the pool's reserved bytes; dense: its caches' arrays); decode steps see the
    limit in force. Allowance 0 makes MLX wait for older work at nearly every operation: the logits must still be
    byte-identical to the unbounded run's."""
    import mlx.core as mx

    from app.workloads import engine as engine_module

    scenario = write_scenario(tmp_path, BURST)
    pool = POOL if backend != "dense" else {}
    seen = []
    real_async_eval = engine_module.mx.async_eval
    held_at = {}

    from app.workloads.inflight_bound import InflightBound

    real_encoding = InflightBound.encoding

    def encoding(self, held_bytes, *, chunk=True):
        held_at["last"] = (held_bytes, self.weight_bytes, chunk)
        return real_encoding(self, held_bytes, chunk=chunk)

    def async_eval(*arrays):
        seen.append((mx.get_memory_limit(), held_at.pop("last", None)))
        return real_async_eval(*arrays)

    default = mx.get_memory_limit()
    monkeypatch.setattr(InflightBound, "encoding", encoding)
    monkeypatch.setattr(engine_module.mx, "async_eval", async_eval)
    bounded, events, logits = run_backend(tiny_llama, scenario, backend, prefill_inflight=0, **pool)
    monkeypatch.undo()
    plain, _, plain_logits = run_backend(tiny_llama, scenario, backend, prefill_inflight=None, **pool)
    assert mx.get_memory_limit() == default
    assert_same_logits(logits, plain_logits, f"{backend}: bound at 0 bytes vs off")

    chunks = [(limit, held) for limit, held in seen if held is not None and held[2]]
    layer_starts = [(limit, held) for limit, held in seen if held is not None and not held[2]]
    prefill_steps = sum(p["prefill_steps"] for p in bounded["phases"].values())
    chunk_tokens = [e.num_tokens for e in events if type(e).__name__ == "Step" and e.type == "prefill"]
    assert len(chunks) == prefill_steps == len(chunk_tokens) and prefill_steps >= 3
    # each layer of a chunk of more than one token starts under the bound too (app/workloads/layer_starts.py)
    assert len(layer_starts) == len(tiny_llama.model.layers) * sum(n > 1 for n in chunk_tokens) > 0
    for limit, (held, weights, _) in chunks + layer_starts:
        assert held > 0 and limit == weights + held  # allowance 0: exactly what the run holds
    assert all(limit == default for limit, held in seen if held is None)  # decode steps: untouched
    assert bounded["prefill_inflight"]["bounded_chunks"] == prefill_steps
    assert plain["prefill_inflight"] == {"allowance_bytes": None, "bounded_chunks": 0, "max_limit_bytes": 0,
                                         "layer_start_waits": 0}
    meta = next(e.meta for e in events if isinstance(e, MetaUpdate))
    assert meta["mlx_cache"]["prefill_inflight_bytes"] == 0 and meta["spec"]["prefill_inflight"] == 0


def test_held_bytes_is_what_each_backend_stores(tiny_llama, tmp_path, monkeypatch):
    """Slab: the pool's reserved K/V bytes as its storage measures them, at every chunk; dense: the bytes of its
    caches' arrays, each array once."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from app.workloads.backends import DenseBackend, PagedBackend, _Rows

    checks = []
    real_held = PagedBackend.held_bytes

    def held_bytes(self):
        checks.append((real_held(self), self.pool.stats().bytes_reserved))
        return checks[-1][0]

    monkeypatch.setattr(PagedBackend, "held_bytes", held_bytes)
    run_backend(tiny_llama, write_scenario(tmp_path, BURST), "slab", prefill_inflight=1 << 20, **POOL)
    assert checks and all(held == stored > 0 for held, stored in checks)

    dense = DenseBackend(num_layers=2)
    assert dense.held_bytes() == 0
    group = [KVCache(), KVCache()]
    for cache in group:
        cache.update_and_fetch(mx.zeros((2, 1, 5, 8)), mx.zeros((2, 1, 5, 8)))
    dense._prefill = {7: _Rows((7, 8), group)}
    dense._prefill[8] = dense._prefill[7]  # one group, two sequences: its arrays counted once
    expected = sum(a.nbytes for c in group for a in (c.keys, c.values))
    assert dense.held_bytes() == expected > 0


def test_the_default_bound_is_on_for_every_run_and_its_rehearsal(monkeypatch, tiny_llama, tmp_path):
    """2 GiB unless a run says otherwise (RunSpec, the flags, bench throughput), and the load-time rehearsal's
    engine gets the run's bound (its peak counts for the process as much as the run's)."""
    from app.bench.throughput import BenchConfig
    from app.workloads import rehearsal
    from app.workloads.engine import Engine
    from app.workloads.spec import RunSpec

    assert RunSpec().prefill_inflight == 2 * 2**30 and BenchConfig().prefill_inflight == 2 * 2**30
    bounds = []
    real_init = Engine.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        bounds.append(self.inflight_bound)

    monkeypatch.setattr(Engine, "__init__", init)
    monkeypatch.setattr(rehearsal, "wants_rehearsal", lambda device: True)  # a CPU run rehearses only when asked
    run_backend(tiny_llama, write_scenario(tmp_path, BURST), "slab", prefill_inflight=3 << 20, **POOL)
    assert len(bounds) == 2 and all(b is not None and b.allowance == 3 << 20 for b in bounds)
    assert bounds[0].bounded_chunks > 0  # the rehearsal's chunks ran under it


def test_the_flag_reaches_every_backend_and_bad_values_are_usage_errors(tmp_path, capsys):
    from app.commands import record
    from app.commands.record_specs import run_specs

    parser = argparse.ArgumentParser()
    record.add_parser(parser.add_subparsers())
    args = parser.parse_args(["record", "--out", str(tmp_path), "--backends", "slab,dense,monolithic",
                              "--prefill-inflight", "1G", "--model", "synthetic:tiny-llama"])
    assert {s.prefill_inflight for s in run_specs(args, ["slab", "dense", "monolithic"])} == {2**30}
    off = parser.parse_args(["record", "--out", str(tmp_path), "--prefill-inflight", "off"])
    assert off.prefill_inflight is None
    assert parser.parse_args(["record", "--out", str(tmp_path)]).prefill_inflight == 2 * 2**30  # the default
    with pytest.raises(SystemExit):
        parser.parse_args(["record", "--out", str(tmp_path), "--prefill-inflight", "lots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert "error: argument --prefill-inflight" in err[-1]


def test_the_trim_runs_by_default_only_without_the_bound():
    """``prefill_trim="auto"`` (the default): no trim under the in-flight bound, the trim's 0.05 without it; a
    fraction or None given explicitly is used as given; anything else is refused."""
    from app.workloads.cache_trim import DEFAULT_FRACTION
    from app.workloads.spec import RunSpec

    assert RunSpec().prefill_trim == "auto" and RunSpec().trim_fraction() is None
    assert RunSpec(prefill_inflight=None).trim_fraction() == DEFAULT_FRACTION == 0.05
    assert RunSpec(prefill_trim=0.2).trim_fraction() == 0.2
    assert RunSpec(prefill_trim=None, prefill_inflight=None).trim_fraction() is None
    for bad in ("sometimes", -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="prefill_trim"):
            RunSpec(prefill_trim=bad)


def test_a_run_under_the_bound_does_not_trim_and_says_so(tiny_llama, tmp_path, monkeypatch):
    import app.workloads.cache_trim as cache_trim

    monkeypatch.setattr(cache_trim, "MIN_TRIM_BYTES", 0)  # a tiny run's cache is small: trim it when asked
    scenario = write_scenario(tmp_path, BURST)
    bounded, events, _ = run_backend(tiny_llama, scenario, "slab", **POOL)
    unbounded, _, _ = run_backend(tiny_llama, scenario, "slab", prefill_inflight=None, prefill_trim=0.0, **POOL)
    assert bounded["cache_trim"] == {"fraction": None, "trims": 0, "trimmed_bytes": 0}
    assert unbounded["cache_trim"]["trims"] >= 1  # the same run trims when the bound is off and the trim asked
    meta = next(e.meta for e in events if isinstance(e, MetaUpdate))["mlx_cache"]
    assert meta["prefill_trim"] == "auto" and meta["prefill_trim_fraction"] is None


@pytest.mark.parametrize("field, value", [("prefill_inflight", -1), ("prefill_trim", "sometimes"),
                                          ("cache_limit", -5)])
def test_bench_throughput_refuses_a_bad_run_parameter_before_any_engine_runs(field, value, monkeypatch):
    from app.bench import throughput

    ran = []
    monkeypatch.setattr(throughput, "run_engine", lambda *args, **kwargs: ran.append(args))
    with pytest.raises(ValueError, match=field):
        throughput.BenchConfig(**{field: value})
    assert ran == []
