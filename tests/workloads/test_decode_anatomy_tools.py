"""The decode-step diagnostics of issue 13, item 5: ``app/bench/device/engine_anatomy.py``'s clock (build and encode
apart) and ``app/bench/decode_bookkeeping.py`` (the pool's per-step bookkeeping, timed without a model)."""

import time


class _FakeMx:
    def __init__(self):
        self.evaluated = []

    def async_eval(self, *arrays):
        time.sleep(0.010)  # "encoding"
        self.evaluated.append(arrays)


class _FakeEngine:
    def __init__(self, mx):
        self.mx = mx

    def _dispatch(self, plan, starts, inputs):
        time.sleep(0.001)  # "building"
        self.mx.async_eval(plan)
        return plan


def test_the_clock_splits_build_from_encode_and_leaves_out_the_first_dispatch():
    from app.bench.device.engine_anatomy import DecodeClock

    mx = _FakeMx()
    clock = DecodeClock(_FakeEngine, mx)
    engine = _FakeEngine(mx)
    mx.async_eval("outside a dispatch")  # not timed: only calls inside a decode dispatch count
    assert clock.encode_ms == []
    for step in range(4):
        assert engine._dispatch(step, [], None) == step  # the patched dispatch returns what the engine's does
    assert len(clock.dispatch_ms) == 4 and len(clock.encode_ms) == 4
    figures = clock.figures()
    assert figures["encode_ms"] >= 9.5 and figures["build_ms"] >= 0.9
    assert figures["build_ms"] < figures["encode_ms"]  # build is the dispatch less its encode (1 ms against 10)
    clock.reset()
    assert clock.figures() == {"build_ms": None, "encode_ms": None}


def test_the_bookkeeping_bench_times_each_call_of_a_decode_step():
    from app.bench.decode_bookkeeping import build_pool, timings

    pool = build_pool(layers=3, batch=4, context=70)
    figures = timings(pool, batch=4, context=70, number=3)
    assert set(figures) == {"prepare_write x 4", "token_slots", "fused_decisions", "run_counts"}
    assert all(us > 0 for us in figures.values())
    pool.check_integrity()  # the timed calls leave the pool consistent
    assert [pool.seq_length(s) for s in range(4)] == [70] * 4
