"""SlabscopeApp: the dashboard shell: tabs, cursor (live / paused / replay), refresh timer, run and recording
controls, and loading recordings.

Refresh model: a timer (REFRESH_HZ) builds one ``ViewState`` and, inside ``App.batch_update()``, redraws only the
visible tab's view plus the scrubber and status bar. Nothing is posted per sample; workers never talk to widgets.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from textual.app import App, ComposeResult
from textual.widgets import Footer, TabbedContent, TabPane

from app.tui import keys
from app.tui.notices import Announcements
from app.tui.data import SessionSet, ViewState, refresh_guarded
from app.tui.ingest import RunController
from app.tui.rank_live import RankRunChoice, new_run_dir
from app.tui.screens.glossary import GlossaryScreen
from app.tui.screens.help import HelpScreen
from app.tui.screens.run_form import RunChoice, RunFormScreen
from app.workloads.spec import PoolChoice
from app.tui import sources
from app.tui.views.fragmentation import FragmentationView
from app.tui.views.fused import FusedView
from app.tui.views.gather import GatherView
from app.tui.views.inspector import InspectorView
from app.tui.views.memory import MemoryView
from app.tui.views.occupancy import OccupancyView
from app.tui.views.ranks import RanksView
from app.tui.views.sessions import SessionsView
from app.tui.widgets.scrubber import Scrubber
from app.tui.widgets.status_bar import StatusBar
from probes.events import Step

CSS_FILE = Path(__file__).resolve().parents[2] / "assets" / "slabscope.tcss"
REFRESH_HZ = 5.0
PLAY_SPEED = 1.0  # replay seconds per wall second
TABS = [("memory", "Memory", MemoryView), ("slabs", "Slabs", OccupancyView), ("frag", "Fragmentation",
        FragmentationView), ("gather", "Gather", GatherView), ("fused", "Fused", FusedView),
        ("inspect", "Inspector", InspectorView)]
X_MODES = ("time", "step", "tokens")
WEB_TAB_NOTE = ("this browser tab runs its own live run: every tab of slabscope web starts its own (recordings "
                "saved with R, and --open, are shared)")


@dataclass
class AppOptions:
    """How the app starts: a live run (autostart) and/or recordings to open; where recordings live."""

    scenario: str = "churn"
    model: str = "smollm2-135m"
    backends: list[str] = field(default_factory=lambda: ["slab", "dense"])
    pool: PoolChoice = field(default_factory=PoolChoice)  # block size, slab blocks, shrink (None: the scenario's)
    gate: float = 1.15
    ranks: int = 1  # > 1: a live distributed run (``record --ranks``)
    launch_backend: str = "ring"
    autostart: bool = True
    open_paths: list[Path] = field(default_factory=list)
    recordings_dir: Path = field(default_factory=sources.recordings_dir)
    worker_factory: Callable[..., Any] | None = None
    rank_args: tuple[str, ...] = ()  # more ``record --ranks`` flags for live distributed runs (tests: --set)


class SlabscopeApp(Announcements, keys.LiveOnlyKeys, App):
    """The slabscope dashboard."""

    TITLE = "slabscope"
    CSS_PATH = str(CSS_FILE)
    BINDINGS = keys.BINDINGS
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # 80x24: the Memory view keeps its chart (CSS)

    def __init__(self, options: AppOptions | None = None) -> None:
        super().__init__()
        self.options = options or AppOptions()
        self.store = SessionSet()
        self._announced: set[tuple] = set()  # (generation, session) whose failure or read problem was notified
        sources.prepare_worker_spawning()  # before Textual captures stderr (see its docstring)
        self.controller = RunController(self.store, self.options.worker_factory or sources.make_worker)
        self.cursor: float | None = None  # None: follow live data
        self._mode = "IDLE"  # LIVE | PAUSED | REPLAY | IDLE (the ``mode`` property)
        self.playing = False
        self.x_mode = "time"
        self.pool_name: str | None = None
        self.gate = self.options.gate
        self.refreshes = 0
        self.opening = None  # app.tui.opening.BackgroundOpen while many recordings open off the UI thread
        self.opening_text: str | None = None

    # ---- layout --------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with TabbedContent(id="tabs"):
            for tab_id, title, view in TABS:
                with TabPane(title, id=f"tab-{tab_id}"):
                    yield view(id=f"view-{tab_id}")
            with TabPane("Sessions", id="tab-sessions"):
                yield SessionsView(self.options.recordings_dir, id="view-sessions")
            with TabPane("Ranks", id="tab-ranks"):
                yield RanksView(id="view-ranks")
        yield Scrubber(id="scrubber")
        yield StatusBar(id="status")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.set_interval(1.0 / REFRESH_HZ, self.refresh_views)
        if self.options.open_paths:
            self.open_recordings(list(self.options.open_paths))
        elif self.options.autostart:
            self.start_run(self._choice_from_options())
            if self.is_web:
                self.notify(WEB_TAB_NOTE, timeout=15)
        self.refresh_views()

    # ---- the refresh tick ----------------------------------------------------------------------------------
    def frame(self) -> ViewState:
        return ViewState(self.store, self.cursor, self.x_mode, self.pool_name, self.gate)

    def refresh_views(self) -> None:
        """Advance replay playback, then redraw the visible view, scrubber and status bar in one batch."""
        base = self._base_screen()
        if base is None:
            return
        self._advance_playback()
        self._report_recordings()
        self._report_crashes()
        self._report_rank_run()
        frame = self.frame()
        tabs = base.query_one(TabbedContent)
        with self.batch_update():
            view = base.query_one(f"#view-{(tabs.active or 'tab-memory').removeprefix('tab-')}")
            refresh_guarded(view, frame)
            base.query_one(Scrubber).show(self.store.duration(), self.cursor, self._primary_peak())
            base.query_one(StatusBar).show(self.store, self._mode_label(), self.cursor,
                                           "rec" if self.controller.recording else None)
        self.refreshes += 1

    def _base_screen(self):
        """The dashboard screen (under any modal), None while the app is starting or shutting down."""
        if not self.is_running or not self.screen_stack:
            return None
        base = self.screen_stack[0]
        return base if base.query(TabbedContent) else None

    def _mode_label(self) -> str:
        """The mode, and for a live run whose every session has ended, how it ended (never before it has)."""
        if self.opening is not None:
            return self.opening_text or "OPENING"
        if self.mode == "REPLAY":
            return "REPLAY ▶" if self.playing else "REPLAY ‖"
        states = {model.status for model in self.store.sessions.values()}
        if self.mode in ("LIVE", "PAUSED") and states and states <= {"done", "error", "stopped"}:
            return f"{self.mode} ({'stopped' if 'stopped' in states else 'finished'})"
        return self.mode

    def _advance_playback(self) -> None:
        if self.mode == "REPLAY" and self.playing and self.cursor is not None:
            self.cursor = min(self.store.duration(), self.cursor + PLAY_SPEED / REFRESH_HZ)
            if self.cursor >= self.store.duration():
                self.playing = False

    def _primary_session(self):
        frame = self.frame()
        return frame.pool_session() or next(iter(self.store.sessions.values()), None)

    def _primary_peak(self) -> float | None:
        """When the primary session's footprint peaked, on the shared axis (rank 0's clock for a rank)."""
        primary = self._primary_session()
        peak = primary.peak().t if primary else None
        return None if peak is None else self.store.to_shared(primary, peak)

    def launcher_output(self) -> list[str]:
        """The live distributed run's ``record`` output so far (the Ranks view shows its tail)."""
        ranks = self.controller.ranks
        return list(ranks.output) if ranks is not None else []

    # ---- runs ----------------------------------------------------------------------------------------------
    def start_run(self, choice: RunChoice) -> None:
        """Start a live run with one worker per backend (or, with ranks > 1, ``record --ranks`` in the background,
        its rank recordings followed as they grow); views follow it live."""
        if self.opening is not None:  # the run replaces what was being opened
            self.opening.cancel()
            self.opening, self.opening_text = None, None
        self.gate = choice.gate
        self.options.scenario, self.options.model, self.options.backends = choice.scenario, choice.model, \
            choice.backends
        self.options.pool = choice.pool
        self.options.ranks, self.options.launch_backend = choice.ranks, choice.launch_backend
        if choice.ranks > 1:
            out = new_run_dir(self.options.recordings_dir, choice.scenario)
            self.controller.start_ranks(RankRunChoice(choice.scenario, choice.model, list(choice.backends),
                                                      choice.ranks, choice.launch_backend, choice.pool,
                                                      tuple(self.options.rank_args)), out)
            self.notify(f"{choice.ranks} ranks via mlx.launch ({choice.launch_backend}), one backend after another; "
                        f"recording every rank into {out}/")
        else:
            self.controller.start(choice.backends, scenario=choice.scenario, model=choice.model,
                                  **choice.pool.worker_params())
        self.mode, self.cursor, self.playing, self.pool_name = "LIVE", None, False, None

    def _choice_from_options(self) -> RunChoice:
        """The run the app's options describe (what autostart starts and the form opens with)."""
        opts = self.options
        return RunChoice(opts.scenario, opts.model, list(opts.backends), opts.pool, self.gate, opts.ranks,
                         opts.launch_backend)

    def action_new_run(self) -> None:
        try:
            scenarios = sources.list_scenarios()
        except Exception as exc:  # noqa: BLE001 - workloads package missing or broken: say so, stay up
            self.notify(f"cannot list scenarios: {exc}", severity="error")
            return
        initial = self._choice_from_options()
        self.push_screen(RunFormScreen(scenarios, initial, check=sources.check_run_choice, models=sources.known_models(),
                                       defaults=sources.scenario_defaults), self._on_form_done)

    def _on_form_done(self, choice: RunChoice | None) -> None:
        if choice is not None:
            self.start_run(choice)

    def action_stop_run(self) -> None:
        """Stop the live run; its sessions end as "stopped" (asked for), not as failures."""
        if not self.controller.running:
            self.notify("the live run has ended already")
            return
        for model in self.store.sessions.values():
            model.stop_requested = True
        self.controller.stop()
        self.notify("stopping the run…")

    def action_toggle_record(self) -> None:
        if self.controller.ranks is not None and self.mode in ("LIVE", "PAUSED"):
            self.notify(f"a distributed run records every rank already: {self.controller.ranks.out}/")
            return
        if self.mode not in ("LIVE", "PAUSED") or self.controller.ingest is None:
            self.notify("recording needs a live run (press n to start one)", severity="warning")
            return
        if self.controller.recording:
            self.controller.stop_recording()
            self.set_timer(0.3, self._announce_recorded)
        else:
            self.controller.start_recording(self.options.recordings_dir)
            self.notify(f"recording into {self.options.recordings_dir}/")

    def _announce_recorded(self) -> None:
        paths = self.controller.recorded_paths()
        self.notify("saved " + ", ".join(p.name for p in paths) if paths else "nothing recorded yet")
        base = self._base_screen()
        if base is not None:
            base.query_one(SessionsView).action_rescan()

    # ---- cursor --------------------------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        if self.mode == "LIVE":
            self.mode, self.cursor = "PAUSED", self.store.duration()
        elif self.mode == "PAUSED":
            self.mode, self.cursor = "LIVE", None
        elif self.mode == "REPLAY":
            if not self.playing and self.cursor is not None and self.cursor >= self.store.duration():
                self.cursor = 0.0
            self.playing = not self.playing
        self.refresh_views()

    def _hold(self) -> None:
        """Stop following live data (stepping or seeking while live pauses the view)."""
        if self.mode == "LIVE":
            self.mode = "PAUSED"
        self.playing = False
        if self.cursor is None:
            self.cursor = self.store.duration()

    def action_step(self, direction: int) -> None:
        self._hold()
        primary = self._primary_session()
        times = primary.snapshot_times() if primary else []
        if not times:
            times = [s.t for s in primary.events_of(Step)] if primary else []
        times = self.store.shared_times(primary, times) if primary else []
        if times:
            if direction > 0:
                later = [t for t in times if t > self.cursor + 1e-9]
                self.cursor = later[0] if later else times[-1]
            else:
                earlier = [t for t in times if t < self.cursor - 1e-9]
                self.cursor = earlier[-1] if earlier else times[0]
        self.refresh_views()

    def action_jump_peak(self) -> None:
        peak = self._primary_peak()
        if peak is None:
            self.notify("no samples yet")
            return
        self._hold()
        self.cursor = peak
        self.refresh_views()

    def action_go_live(self) -> None:
        if self.mode == "PAUSED":
            self.mode, self.cursor = "LIVE", None
            self.refresh_views()

    def on_scrubber_seek(self, message: Scrubber.Seek) -> None:
        self._hold()
        self.cursor = message.t
        self.refresh_views()

    # ---- display choices -----------------------------------------------------------------------------------
    def action_cycle_x(self) -> None:
        self.x_mode = X_MODES[(X_MODES.index(self.x_mode) + 1) % len(X_MODES)]
        self.notify(f"x axis: {self.x_mode}")
        self.refresh_views()

    def action_cycle_rank(self) -> None:
        """The pool views show the next rank of the distributed run they show (the first run's when they show
        none); the cursor stays on the same aligned instant, which each rank reads on its own clock."""
        runs = [r for r in self.store.runs if any(m.is_pool for m in r.sessions)]
        if not runs:
            self.notify("no distributed run with a pool on screen (open a run's rank recordings)")
            return
        current = self.frame().pool_session()
        place = self.store.run_of(current) if current is not None else None
        run, rank = place if place is not None and place[0] in runs else (runs[0], -1)
        self.pool_name = run.sessions[(rank + 1) % run.world_size].label
        self.notify(f"pool views show: {self.pool_name}")
        self.refresh_views()

    def action_cycle_pool(self) -> None:
        names = [m.label for m in self.store.pool_sessions()]
        if names:
            current = self.frame().pool_session()
            index = names.index(current.label) if current and current.label in names else -1
            self.pool_name = names[(index + 1) % len(names)]
            self.notify(f"pool views show: {self.pool_name}")
            self.refresh_views()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_show_tab(self, tab: str) -> None:
        base = self._base_screen()
        if base is not None:
            base.query_one(TabbedContent).active = f"tab-{tab}"
        self.refresh_views()

    def action_help(self) -> None:
        sections = [("app", keys.help_bindings())]
        for cls in (InspectorView, SessionsView):
            sections.append((cls.__name__.removesuffix("View").lower(), list(cls.BINDINGS)))
        self.push_screen(HelpScreen(sections, keys.LONG_HELP))

    def action_glossary(self, topic: str = "") -> None:
        """The glossary (what every figure and word means), opened at ``topic`` (a view's name: its terms) or at
        the visible view's terms."""
        if isinstance(self.screen, GlossaryScreen):
            return
        base = self._base_screen()
        if not topic and base is not None:
            topic = (base.query_one(TabbedContent).active or "tab-memory").removeprefix("tab-")
        self.push_screen(GlossaryScreen(topic))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """Focus the tab's main widget so its keys work at once, then redraw it."""
        # A focused widget left behind in a hidden pane would pull TabbedContent back to that pane.
        focus_targets = {"tab-inspect": "#inspect-map", "tab-sessions": "#sessions-list", "tab-frag": "#frag-table",
                         "tab-ranks": "#ranks-table",
                         "tab-fused": "#fused-table", "tab-memory": "#memory-chart", "tab-slabs": "#slab-scroll",
                         "tab-gather": "#gather-hist-box"}
        target = focus_targets.get(event.pane.id or "")
        self.set_focus(event.pane.query_one(target) if target else None)
        self.refresh_views()

    # ---- recordings ----------------------------------------------------------------------------------------
    def on_sessions_view_open_recordings(self, message: SessionsView.OpenRecordings) -> None:
        self.open_recordings(message.paths, as_run=message.run)

    def open_recordings(self, paths: list[Path], as_run: bool = False) -> None:
        """Load session files (or directories of them) into the store (stops any live run) and enter replay at the
        end of the sessions (``P`` jumps to the peak). The rank recordings of a distributed run open as one run
        (``sources.open_recordings``). Many files open off the UI thread (``app/tui/opening.py``), so keys (q) keep
        working meanwhile. Recordings still being written (a running ``slabscope serve --record DIR``) are followed
        live instead."""
        from app.tui.live_follow import live_paths
        from app.tui.opening import BackgroundOpen, in_background

        if not as_run and live_paths(paths):
            self.follow_recordings(paths)
            return
        files = sources.expand_paths(paths)
        if self.opening is not None:
            self.opening.cancel()
        if not in_background(files):
            self._install_opened(sources.open_recordings(paths, as_run, files=files), paths)
            return
        self.opening = BackgroundOpen(self, paths, files, as_run, lambda opened: self._install_opened(opened, paths),
                                      self._opening_step).start()
        self.notify(f"opening {len(files):,} recording{'s' if len(files) != 1 else ''}; q quits at any time")
        self.refresh_views()

    def _opening_step(self, count: int, total: int) -> None:
        self.opening_text = f"OPENING {count:,}/{total:,}"

    def _install_opened(self, opened, paths: list[Path]) -> None:
        """Show what ``sources.open_recordings`` opened (the app's thread)."""
        self.opening, self.opening_text = None, None
        for problem in opened.problems:
            self.notify(problem, severity="error", timeout=30)
        if not opened.runs and not opened.plain:
            return
        self.controller.stop()
        self.store.reset()
        for run in opened.runs:
            self.store.add_run(run)
        for session in opened.plain:
            self.store.add(session)
        self.mode, self.playing, self.pool_name = "REPLAY", False, None
        self.cursor = self.store.duration()  # the end: the whole-run verdict and the cursor's figures agree
        self.notify(f"replaying {', '.join(Path(p).name for p in paths)}")
        for session in [*(s for run in opened.runs for s in run.sessions), *opened.plain]:
            if session.damage is not None:
                self.notify(f"{session.path}: {session.damage}; showing the {session.duration:.1f} s before it",
                            severity="warning", timeout=30)
        self.refresh_views()

    def follow_recordings(self, paths: list[Path]) -> None:
        """Follow the recordings being written in ``paths`` (a live server's): views follow them live, requests
        show as they arrive and finish."""
        follower = self.controller.follow(paths)
        self.mode, self.cursor, self.playing, self.pool_name = "LIVE", None, False, None
        urls = sorted({str(s.meta.get("serve", {}).get("url", "")) for s in follower.shown.values()} - {""})
        self.notify(f"following {', '.join(Path(p).name for p in paths)} live" + (f" ({', '.join(urls)})"
                                                                                    if urls else ""))
        self.refresh_views()

    async def action_quit(self) -> None:
        """Stop every worker and rank (bounded), and an opening in progress, then exit; a distributed run's stop runs
        off the event loop so the screen says what is happening."""
        if self.opening is not None:
            self.opening.cancel()
        if self.controller.ranks is not None and self.controller.ranks.alive:
            self.notify("stopping every rank…")
            await asyncio.to_thread(self.controller.shutdown)
        else:
            self.controller.shutdown()
        self.exit()

    def on_unmount(self) -> None:
        if self.opening is not None:
            self.opening.cancel()
        self.controller.shutdown()
