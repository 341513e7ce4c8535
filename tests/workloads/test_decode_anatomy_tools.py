"""The decode-step diagnostics: the lab's engine clock (``lab/engine_rounds.py``, used by
``lab/decode_step/engine_anatomy.py`` and ``lab/open_blocks/warm_rounds.py``: build and encode apart) and
``slabscope bench bookkeeping`` (the pool's per-step bookkeeping, timed without a model)."""

import json

import pytest

from app.cli import main


class _Clock:
    """A perf_counter the fakes advance by what their work "takes" (no sleeping: the split is exact)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


CLOCK = _Clock()


class _FakeMx:
    def __init__(self):
        self.evaluated = []

    def async_eval(self, *arrays):
        CLOCK.now += 0.010  # "encoding": 10 ms
        self.evaluated.append(arrays)


class _FakeEngine:
    def __init__(self, mx):
        self.mx = mx

    def _dispatch(self, plan, starts, inputs):
        CLOCK.now += 0.001  # "building": 1 ms
        self.mx.async_eval(plan)
        return plan


def test_the_clock_splits_build_from_encode_and_leaves_out_the_first_dispatch(monkeypatch):
    import lab.engine_rounds as engine_rounds
    from lab.engine_rounds import DecodeClock

    monkeypatch.setattr(engine_rounds.time, "perf_counter", CLOCK)
    mx = _FakeMx()
    clock = DecodeClock(_FakeEngine, mx)
    engine = _FakeEngine(mx)
    mx.async_eval("outside a dispatch")  # not timed: only calls inside a decode dispatch count
    assert clock.encode_ms == []
    for step in range(4):
        assert engine._dispatch(step, [], None) == step  # the patched dispatch returns what the engine's does
    assert len(clock.dispatch_ms) == 4 and len(clock.encode_ms) == 4
    figures = clock.figures()  # build is the dispatch less its encode
    assert figures == {"build_ms": pytest.approx(1.0), "encode_ms": pytest.approx(10.0)}
    clock.reset()
    assert clock.figures() == {"build_ms": None, "encode_ms": None}


def test_the_bookkeeping_bench_times_each_call_of_a_decode_step():
    from app.bench.decode_bookkeeping import build_pool, timings

    pool = build_pool(layers=3, batch=4, context=70)
    figures = timings(pool, batch=4, context=70, number=3)
    assert set(figures) == {"prepare_write x 4", "write_slots", "fused_decision", "step_view", "run_counts"}
    assert all(us > 0 for us in figures.values())
    pool.check_integrity()  # the timed calls leave the pool consistent
    assert pool.step_view(range(4)).lengths == (70,) * 4


def test_the_bookkeeping_command_prints_its_figures(capsys):
    argv = ["bench", "bookkeeping", "--layers", "2", "--batch", "3", "--context", "40", "--number", "2", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["layers"], result["batch"], result["context"]) == (2, 3, 40)
    assert set(result["us_per_call"]) == {"prepare_write x 3", "write_slots", "fused_decision", "step_view",
                                          "run_counts"}
    assert result["us_per_step"] == pytest.approx(sum(result["us_per_call"].values()))


@pytest.mark.parametrize("argv, message", [
    (["--layers", "0"], "argument --layers: must be >= 1, got 0"),
    (["--layers", "1024", "--batch", "4096", "--context", "1000"], "4,194,304,000 token rows; at most"),
], ids=["no layers", "too large"])
def test_bad_bookkeeping_arguments_exit_2_with_one_line_and_build_nothing(argv, message, capsys, monkeypatch):
    import app.bench.decode_bookkeeping as bench

    monkeypatch.setattr(bench, "build_pool", lambda *a: pytest.fail("a pool was built"))
    assert main(["bench", "bookkeeping", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err and len(captured.err.strip().splitlines()) == 1
