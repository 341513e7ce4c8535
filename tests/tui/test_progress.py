"""Progress everywhere a user waits (issue 27, item 3): the worker says where it is before its probes start; the
status bar shows it from launch (starting worker, loading model, phase, requests k/N, tokens, ETA) and never says
finished before every session has ended; ``x`` ends a run as "stopped", not as a failure; ``run`` and ``record``
print the same progress; the run summary says what MLX's peak counter means next to the sampled footprint."""

from __future__ import annotations

import asyncio
import io
import threading

from tui_fixtures import event_stream
from tui_helpers import wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from probes.events import Done, MetaUpdate, PhaseEdge, RequestDone, RunStage, Step, WorkerError
from probes.progress import RunProgress

PHASES = [{"name": "warm", "kind": "idle", "seconds": 2.0},
          {"name": "churn", "kind": "requests", "count": 4}, {"name": "talk", "kind": "conversation", "turns": 2}]


def test_progress_folds_stages_phases_requests_and_an_estimate():
    """Stage by stage, as a user would read it; the estimate appears once a request finished and is the request
    phases' time per finished request times the requests left. 'done' only after Done; a cancelled run is
    'stopped'. Counting requests from the wrong phase key, or saying done at the last phase's end, fails here."""
    p = RunProgress()
    seen = [p.text()]
    for event in (RunStage(t=1.0, stage="loading model", detail="importing MLX"),
                  RunStage(t=3.0, stage="loading model", detail="smollm2-135m"),
                  MetaUpdate(t=5.0, meta={"scenario": {"phases": PHASES}}),
                  PhaseEdge(t=5.0, name="warm", edge="start")):
        p.fold(event)
        seen.append(p.text())
    assert seen == ["starting…", "loading model (importing MLX)…", "loading model (smollm2-135m)…",
                    "loading model (smollm2-135m)…", "phase warm 1/3 · requests done 0/6 · 0 tokens"]
    p.fold(PhaseEdge(t=7.0, name="warm", edge="end"))
    p.fold(PhaseEdge(t=7.0, name="churn", edge="start"))
    p.fold(Step(t=8.0, tokens=300, phase="churn", type="prefill", batch=1, num_tokens=300, wall_s=0.1))
    p.fold(RequestDone(t=9.0, tokens=340, req_id=0, seq_id=0, prompt_tokens=300, generated_tokens=40))
    assert p.eta_s() == 2.0 * 5  # 2 s of request phases per finished request, 5 left; no idle phase left
    assert p.text() == "phase churn 2/3 · requests done 1/6 · 340 tokens · ETA ~10 s (estimate)"
    assert p.short_text() == "churn 1/6 req · 340 tok · ETA ~10 s"
    p.fold(RequestDone(t=13.0, tokens=700, req_id=1, seq_id=1, prompt_tokens=300, generated_tokens=40))
    assert p.eta_s() == 6.0 / 2 * 4  # 6 s for 2 requests, 4 left
    p.fold(PhaseEdge(t=14.0, name="churn", edge="end"))
    p.fold(PhaseEdge(t=14.0, name="talk", edge="start"))
    p.fold(PhaseEdge(t=20.0, name="talk", edge="end"))  # the last phase's end is not the run's end
    assert not p.finished and p.stage == "talk"
    p.fold(Done(t=20.0, tokens=900, summary={"steps": 9}))
    assert p.text() == "done · 2/6 requests · 900 tokens" and p.eta_s() is None
    stopped = RunProgress()
    stopped.fold(Done(t=1.0, summary={"cancelled": True}))
    assert stopped.stage == "stopped"


def test_the_sink_says_the_stage_at_once_and_holds_the_rest_for_the_probes():
    """Before the probes start, a ``RunStage`` goes straight out (stamped); other events wait for the probes (they
    send the metadata first). Holding the stage too (the old sink) fails here."""
    from app.workloads.spec import RunSpec
    from app.workloads.worker_sink import make_sink

    out: list = []
    sink = make_sink(out.append, RunSpec(model="synthetic:tiny-llama"))
    sink.emit(RunStage(stage="loading model", detail="importing MLX"))
    sink.emit(PhaseEdge(t=2.0, name="warm", edge="start"))
    assert [type(e) for e in out] == [RunStage] and out[0].t > 0
    assert len(sink._held) == 1


class GatedWorker:
    """A worker whose start takes until ``spawned`` is set (a spawn on a loaded machine: the ingest thread waits in
    ``start`` and the handle is not alive yet), then says nothing until ``release(events)``; ``cancel`` ends it from
    outside, as ``WorkerHandle.cancel`` does to a worker busy loading (the parent reports the signal)."""

    def __init__(self, spawned: threading.Event) -> None:
        self.started = self.cancelled = False
        self.spawned = spawned
        self.pending: list = []
        self.error = None

    def start(self) -> "GatedWorker":
        self.spawned.wait(30)
        self.started = True
        return self

    def release(self, events: list) -> None:
        self.pending += events

    @property
    def alive(self) -> bool:
        return self.started and not self.cancelled and not any(isinstance(e, Done) for e in self.pending)

    def poll(self) -> list:
        batch, self.pending = self.pending, [e for e in self.pending if isinstance(e, Done)]
        return [e for e in batch if not isinstance(e, Done)] + [e for e in batch if isinstance(e, Done)]

    def cancel(self) -> None:
        self.cancelled = True
        self.pending.append(WorkerError(t=1.0, step=-1, tokens=-1, origin="parent",
                                        text="killed by signal 15 (SIGTERM) after cancel"))


def _gated_app(tmp_path, spawned: threading.Event | None = None):
    made: dict[str, GatedWorker] = {}
    if spawned is None:
        spawned = threading.Event()
        spawned.set()

    def factory(name: str, **params) -> GatedWorker:
        made[name] = GatedWorker(spawned)
        return made[name]

    app = SlabscopeApp(AppOptions(worker_factory=factory, recordings_dir=tmp_path / "recs"))
    return app, made


def _status(app) -> str:
    return screen_text(app).splitlines()[-2]


def test_the_status_bar_shows_progress_from_launch_and_finished_only_at_the_end(tmp_path):
    """While the workers spawn (not alive yet) and before one says anything, the status reads LIVE with 'starting
    worker…' (the old bar read 'LIVE (finished)' here); then the worker's stage; then the phase with requests k/N;
    'finished' only once every session ended."""
    spawned = threading.Event()
    app, made = _gated_app(tmp_path, spawned)

    async def go():
        seen = {}
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: len(made) == 2 and "starting worker…" in _status(app), timeout=10)
            seen["launch"] = _status(app)
            spawned.set()
            made["slab"].release([RunStage(t=999.0, stage="loading model", detail="importing MLX")])
            await wait_for(pilot, lambda: "loading model" in _status(app), timeout=10)
            seen["loading"] = _status(app)
            stream = event_stream("slab")
            made["slab"].release(stream[:10])
            await wait_for(pilot, lambda: "burst" in _status(app), timeout=10)
            seen["phase"] = _status(app)
            made["slab"].release(stream[10:])
            await wait_for(pilot, lambda: app.store.sessions["slab"].status == "done", timeout=10)
            app.refresh_views()
            seen["one_done"] = _status(app)
            made["dense"].release(event_stream("dense"))
            await wait_for(pilot, lambda: "(finished)" in _status(app), timeout=10)
            seen["all_done"] = _status(app)
        return seen

    seen = asyncio.run(go())
    assert seen["launch"].startswith(" LIVE  ") and "slab ○ starting worker…" in seen["launch"]
    assert "(finished)" not in seen["launch"]
    assert "slab ● loading model…" in seen["loading"] and "dense ○ starting worker…" in seen["loading"]
    assert "slab ● burst 0 req · " in seen["phase"]
    assert "(finished)" not in seen["one_done"] and "slab ✓" in seen["one_done"]
    assert seen["all_done"].startswith(" LIVE (finished) ")


def test_x_ends_the_run_as_stopped_not_as_a_failure(tmp_path):
    """x while the workers still load: each is ended from outside (the parent reports 'killed by signal 15'), and
    the status bar says 'stopped', the mode 'LIVE (stopped)', with no error notification. The old app showed
    '✗ killed by signal 15' in red and notified it as a crash."""
    app, made = _gated_app(tmp_path)

    async def go():
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: len(made) == 2, timeout=10)
            made["slab"].release([RunStage(t=999.0, stage="loading model", detail="importing MLX")])
            await wait_for(pilot, lambda: "loading model" in _status(app), timeout=10)
            await pilot.press("x")
            await wait_for(pilot, lambda: "(stopped)" in _status(app), timeout=10)
            await pilot.pause(0.3)
            notes = [n.message for n in app._notifications]
            return _status(app), notes, {n: m.status for n, m in app.store.sessions.items()}

    status, notes, states = asyncio.run(go())
    assert states == {"slab": "stopped", "dense": "stopped"}
    assert "slab ■ stopped" in status and "dense ■ stopped" in status and "signal" not in status
    assert not any("signal" in note for note in notes) and any("stopping the run" in note for note in notes)


def test_run_and_record_print_where_the_run_is():
    """``slabscope run`` prints the stage at once and its step lines carry requests k/N; ``record``'s line per
    backend says the stage before the first phase, then the phase and requests (the same ``RunProgress``)."""
    from app.commands.record import _Progress
    from app.commands.run import Progress

    events = event_stream("slab")[:6]
    events[0] = MetaUpdate(t=events[0].t, meta={**events[0].meta, "model": {"name": "tiny", "dtype": "float32"}})
    out = io.StringIO()
    run = Progress(out)
    for event in [RunStage(t=1.0, stage="loading model", detail="tiny"), *events]:
        run.on_event(event)
    printed = out.getvalue()
    assert printed.startswith("loading model (tiny)…\n") and "requests done 0" in printed
    record = _Progress("slab", io.StringIO())
    record.on_event(RunStage(t=1.0, stage="loading model", detail="tiny"))
    loading = record.line()
    for event in events:
        record.on_event(event)
    assert loading == "[slab      ] loading model (tiny)…"
    assert record.line().startswith("[slab      ] phase burst · requests done 0 · ") and "act+cache now" in record.line()


def test_the_run_summary_says_what_mlxs_peak_counter_means_beside_the_sampled_footprint():
    """MLX's peak above the sampled footprint: the summary says a short peak fell between samples and that the
    footprint reached at least the counter's figure (the old summary printed both numbers without a word)."""
    from app.commands.run import footprint_lines

    mib = 2 ** 20
    fp = {"max_footprint_bytes": 635 * mib, "mlx_peak_bytes": 744 * mib, "max_active_bytes": 600 * mib,
          "max_cache_bytes": 40 * mib, "max_rss_bytes": 900 * mib, "samples": 52}
    sampled, counter = footprint_lines(fp)
    assert sampled.startswith("footprint: max(active+cache) 635.0 MiB, sampled at 52 step boundaries")
    assert "744.0 MiB of active memory alone, above the sampled footprint" in counter
    assert "reached at least 744.0 MiB" in counter
    below = footprint_lines({**fp, "mlx_peak_bytes": 500 * mib})[1]
    assert "at least" not in below and "misses the buffer cache" in below


def test_bench_runs_say_k_of_n_and_an_estimate(monkeypatch):
    """``bench throughput``'s warm part says it loads the model, then '[k/N] label…' before each run and the run's
    figures with the time so far and an estimate of the time left after it (the old lines had no total and no
    estimate). The runs are stubbed: this is about what a user waiting on the bench reads."""
    from app.bench import throughput
    from app.bench.progress import RunClock

    now = [100.0]

    def run_engine(engine, config, loaded, requests):
        now[0] += 10.0
        return {"tok_s": 1.0}

    monkeypatch.setattr(throughput, "load", lambda config: (None, []))
    monkeypatch.setattr(throughput, "run_engine", run_engine)
    monkeypatch.setattr(throughput, "_line", lambda figures: f"{figures['tok_s']:.1f} tok/s")

    class Freed:  # what ``release`` says after a run (no MLX here)
        def line(self) -> str:
            return "released"

        def to_json(self) -> dict:
            return {}

    monkeypatch.setattr(throughput, "release", Freed)
    said: list[str] = []
    config = throughput.BenchConfig(engines=("dense", "slab"), rounds=1, fresh_rounds=0, model="tiny")
    throughput.warm_runs(config, RunClock(4, said.append, clock=lambda: now[0]))
    assert said[:3] == ["loading model tiny…", "[1/4] warm-up dense…",
                        "[1/4] warm-up dense: 1.0 tok/s; released (10 s so far, ETA ~30 s (estimate))"]
    assert said[-1] == "[4/4] round 1 slab: 1.0 tok/s; released (40 s so far)" and len(said) == 9


def test_a_recording_still_being_written_shows_where_its_run_is(tmp_path):
    """A recording followed while its writer runs (a rank of a live distributed run) shows its phase and requests on
    the status bar like a live worker; once its END record is in (or for a finished recording) it shows none."""
    from app.tui.widgets.status_bar import live_progress
    from probes.follow import GrowingSession
    from probes.recording import SessionRecorder

    stream = event_stream("slab")
    meta = {**stream[0].meta, "scenario": {"phases": [{"name": "burst", "kind": "requests", "count": 3}]}}
    recorder = SessionRecorder(tmp_path / "rank.slabrec", meta, stream[0].t)
    recorder.write([e for e in stream[1:12] if not isinstance(e, (MetaUpdate, Done))])
    growing = GrowingSession.open(tmp_path / "rank.slabrec")
    assert growing.growing and live_progress(growing) == f"burst 0/3 req · {stream[11].tokens} tok"
    recorder.close({"steps": 5}, t=stream[11].t)
    growing.refresh()
    assert not growing.growing and live_progress(growing) is None
