"""Run form: choose scenario, model, backends, block size, slab size and shrink policy (and the ratio gate) for a new
live run, and how many ranks it runs across (ranks > 1: tensor parallel through ``mlx.launch`` with the chosen launch
backend, every rank recorded: ``slabscope record --ranks``).

The model is picked from the models slabscope knows (or "a local mlx-lm directory", typed below it); the block and
slab size fields, left empty, say the chosen scenario's own values ("scenario default (8)"), read from its file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select

from app.workloads.launch import LAUNCH_BACKENDS  # mlx-free, as the TUI needs (rank_live imports it too)
from app.workloads.spec import PoolChoice
from pool.shrink_types import SHRINK_MODES

BACKENDS = ("slab", "dense", "monolithic")
PATH_CHOICE = "__path__"  # the model Select's "a local mlx-lm directory" entry: the path field below it says which


@dataclass
class RunChoice:
    """What the form returns."""

    scenario: str
    model: str
    backends: list[str]
    pool: PoolChoice  # block size, slab blocks (None: the scenario's), shrink policy
    gate: float
    ranks: int = 1
    launch_backend: str = "ring"


class RunFormScreen(ModalScreen[RunChoice | None]):
    """Modal form; dismisses with a RunChoice, or None when cancelled. Validates before closing: its own fields, then
    ``check`` (a choice -> one-line problem or None: a model whose heads do not split across the ranks...)."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("ctrl+s", "submit", "start")]

    def __init__(self, scenarios: list[tuple[str, str]], initial: RunChoice,
                 check: Callable[[RunChoice], str | None] | None = None, models: list[str] | None = None,
                 defaults: Callable[[str], dict] | None = None) -> None:
        super().__init__()
        self.scenarios = scenarios
        self.initial = initial
        self.check = check
        self.models = list(models or [])
        self.defaults = defaults  # scenario name -> its pool parameters when the form leaves them empty

    def compose(self) -> ComposeResult:
        init = self.initial
        with Vertical(id="run-form"):
            yield Label("New live run", id="run-form-title")
            with Grid(id="run-form-grid"):
                yield Label("scenario")
                options = [(f"{name} - {desc[:40]}", name) for name, desc in self.scenarios]
                names = [name for name, _ in self.scenarios]
                yield Select(options, value=init.scenario if init.scenario in names else Select.BLANK,
                             id="form-scenario", allow_blank=not names, compact=True)
                yield Label("model")
                known = init.model in self.models
                yield Select([(name, name) for name in self.models] + [("a local mlx-lm directory…", PATH_CHOICE)],
                             value=init.model if known else PATH_CHOICE, id="form-model", allow_blank=False,
                             compact=True)
                yield Label("  directory")
                yield Input("" if known else init.model, id="form-model-path", disabled=known, compact=True,
                            placeholder="path to an mlx-lm model directory (config.json + *.safetensors)")
                pool = self._scenario_pool(init.scenario)
                yield Label("block size")
                yield Input("" if init.pool.block_size is None else str(init.pool.block_size), id="form-block",
                            placeholder=_default_text(pool, "block_size"), type="integer", compact=True)
                yield Label("slab blocks")
                yield Input("" if init.pool.slab_blocks is None else str(init.pool.slab_blocks), id="form-slab",
                            placeholder=_default_text(pool, "slab_blocks"), type="integer", compact=True)
                yield Label("shrink")
                shrink = init.pool.shrink
                yield Select([(mode, mode) for mode in SHRINK_MODES], value=shrink if shrink in SHRINK_MODES
                             else "off", id="form-shrink", allow_blank=False, compact=True)
                yield Label("ratio gate")
                yield Input(f"{init.gate:g}", id="form-gate", type="number", compact=True)
                yield Label("ranks")
                yield Input(str(init.ranks), id="form-ranks", placeholder="1 = one process per backend",
                            type="integer", compact=True)
                yield Label("launch")
                yield Select([(f"{name} (mlx.launch --backend {name})", name) for name in LAUNCH_BACKENDS],
                             value=init.launch_backend if init.launch_backend in LAUNCH_BACKENDS else "ring",
                             id="form-launch", allow_blank=False, compact=True)
            with Horizontal(id="form-backends"):
                for name in BACKENDS:
                    yield Checkbox(name, value=name in init.backends, id=f"form-backend-{name}", compact=True)
            yield Label("", id="form-error")
            with Horizontal(id="form-buttons"):
                yield Button("Start", variant="primary", id="form-start", compact=True)
                yield Button("Cancel", id="form-cancel", compact=True)

    def _scenario_pool(self, scenario: object) -> dict:
        """The scenario's pool parameters ({} when unknown or unreadable: the form still opens)."""
        if self.defaults is None or not isinstance(scenario, str) or not scenario:
            return {}
        try:
            return self.defaults(scenario)
        except (ValueError, OSError):  # a broken scenario file: the run's own check says why on Start
            return {}

    def on_select_changed(self, event: Select.Changed) -> None:
        """A scenario's own block and slab sizes as the empty fields' placeholders; the path field for a model
        directory."""
        if event.select.id == "form-scenario":
            pool = self._scenario_pool(event.value)
            self.query_one("#form-block", Input).placeholder = _default_text(pool, "block_size")
            self.query_one("#form-slab", Input).placeholder = _default_text(pool, "slab_blocks")
        elif event.select.id == "form-model":
            self.query_one("#form-model-path", Input).disabled = event.value != PATH_CHOICE

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "form-start":
            self.action_submit()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_submit(self) -> None:
        try:
            choice = self._read()
            problem = self.check(choice) if self.check is not None else None
            if problem:
                raise ValueError(problem)
        except ValueError as exc:
            self.query_one("#form-error", Label).update(f"[b red]{exc}[/]")
            return
        self.dismiss(choice)

    def _read(self) -> RunChoice:
        """The form's values, validated (ValueError names the bad field)."""
        scenario = self.query_one("#form-scenario", Select).value
        if scenario is Select.BLANK or not scenario:
            raise ValueError("choose a scenario")
        model = str(self.query_one("#form-model", Select).value)
        if model == PATH_CHOICE:
            model = self.query_one("#form-model-path", Input).value.strip()
            if not model:
                raise ValueError("type the model directory's path (or pick a known model)")
        backends = [n for n in BACKENDS if self.query_one(f"#form-backend-{n}", Checkbox).value]
        if not backends:
            raise ValueError("choose at least one backend")
        gate = float(self.query_one("#form-gate", Input).value or 1.15)
        if gate <= 0:
            raise ValueError("ratio gate must be > 0")
        ranks = _positive(self, "#form-ranks", "ranks") or 1
        launch = str(self.query_one("#form-launch", Select).value)
        pool = PoolChoice(_positive(self, "#form-block", "block size"), _positive(self, "#form-slab", "slab blocks"),
                          str(self.query_one("#form-shrink", Select).value))
        return RunChoice(str(scenario), model, backends, pool, gate, ranks, launch)


def _default_text(pool: dict, key: str) -> str:
    value = pool.get(key)
    return f"scenario default ({value})" if value is not None else "scenario default"


def _positive(screen: ModalScreen, selector: str, name: str) -> int | None:
    text = screen.query_one(selector, Input).value.strip()
    if not text:
        return None
    value = int(text)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer")
    return value
