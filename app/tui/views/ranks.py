"""Ranks view: the rank recordings of distributed runs (``slabscope record --ranks``) as one run each: a header per
run (world size, launch backend, clock bound and residual skew; per rank its host, KV heads, bytes per token, device
memory, clock offset and state), every rank's footprint lane on one time axis (rank 0's clock), a peak lane (the
phase bands and each rank's peak, so the rank that peaks first shows), and the merged imbalance row per phase
(``probes.ranks.imbalance_rows``). A live distributed run adds the tail of its launcher's output."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.lane import Lane
from app.tui.widgets.memory_chart import ChartData, MemoryChart, Series
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE, human_bytes, seq_colour
from probes.ranks import IMBALANCE_COLUMNS, ImbalanceRow, RankRun, imbalance_rows, rank_info, rank_lanes
from probes.store import SessionModel

LOG_LINES = 3  # launcher output lines shown for a live distributed run


def rank_state(model: SessionModel) -> tuple[str, str, str]:
    """(mark, words, style) for a rank's state: running, complete, stopped with its error, a damaged file read up to
    its damage (as ``probes.ranks.describe_run`` says), or died without closing its recording."""
    if model.error is not None:
        return "✗", model.error.text, WARN_STYLE
    if model.damage is not None:
        return "✗", f"damaged file (read up to byte {model.damage.offset})", WARN_STYLE
    if model.complete:
        error = model.summary.summary.get("error")
        return ("✗", f"stopped: {error}", WARN_STYLE) if error else ("✓", "complete", OK_STYLE)
    if getattr(model, "growing", False):  # a live run's recording, still being written
        return "●", "running", OK_STYLE
    return "✗", "died: recording never closed", WARN_STYLE


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def run_header(run: RankRun) -> Text:
    """The run's line (world size, launch backend, clock bound and residual) and one line per rank."""
    text = Text(no_wrap=True, overflow="ellipsis")
    bound = max(clock.bound_s for clock in run.clocks)
    residual = max(clock.residual_s for clock in run.clocks)
    text.append(f"{run.label}: {run.world_size} ranks via mlx.launch ({run.launch_backend})", style="bold")
    text.append(f"  clock bound {_ms(bound)} ms, residual skew {_ms(residual)} ms  run {run.run_id}", style="dim")
    for rank, (model, clock) in enumerate(zip(run.sessions, run.clocks)):
        info = rank_info(model) or {}
        shard = info.get("shard") or {}
        heads = shard.get("kv_heads") or ["?", "?"]
        memory = (info.get("device_memory") or {}).get("bytes")
        where = "reference clock" if rank == 0 else f"clock {1e3 * clock.offset(0.0):+.3f} ms"
        mark, words, style = rank_state(model)
        text.append(f"\n  r{rank} ")
        text.append(mark, style=style)
        text.append(f" {info.get('host', '?')} pid {info.get('pid', '?')}  KV heads [{heads[0]}, {heads[1]}) of "
                    f"{shard.get('n_kv_heads_total', '?')}  {shard.get('kv_bytes_per_token', '?')} B/token  "
                    f"{human_bytes(memory) if memory else '?'}  {where}  ")
        text.append(words, style=style)
    return text


def alone_line(model: SessionModel) -> Text | None:
    """A rank recording on screen without its run (opened alone, or its run misses a rank)."""
    info = rank_info(model)
    if info is None:
        return None
    return Text(f"{model.label}: rank {info['rank']} of {info['world_size']} of run {info['run_id']}, shown alone (not "
                "aligned: open all its ranks, or their directory, to merge them)", style="dim")


def lane_series(frame: ViewState) -> ChartData:
    """Every rank's footprint on rank 0's clock (``probes.ranks.rank_lanes``), its peak, the phase starts of rank 0
    and the cursor."""
    data = ChartData(x_label="time (s, rank 0's clock)")
    index = 0
    for run in frame.sessions.runs:
        for rank, lane in enumerate(rank_lanes(run)):
            xs, ys = [t for t, _ in lane], [v for _, v in lane]
            peak = max(range(len(ys)), key=ys.__getitem__) if ys else None
            data.series.append(Series(run.rank_label(rank), xs, ys, seq_colour(index),
                                      peak=(xs[peak], ys[peak]) if peak is not None else None))
            index += 1
        data.phase_starts.extend(p.start for p in run.sessions[0].phases())
    data.cursor = frame.cursor
    return data


def peak_lanes(frame: ViewState) -> dict[str, list[tuple[float, str, str]]]:
    """Per rank: its phase bands and its peak (▲) on the shared axis."""
    lanes: dict[str, list[tuple[float, str, str]]] = {}
    index = 0
    for run in frame.sessions.runs:
        for rank, (model, clock) in enumerate(zip(run.sessions, run.clocks)):
            colour = seq_colour(index)
            index += 1
            marks = []
            for phase in model.phases():
                start = clock.to_reference(phase.start)
                end = clock.to_reference(phase.end if phase.end is not None else model.duration)
                marks += [(start + (end - start) * k / 120, "━", colour) for k in range(121)]
            peak = model.peak().t
            if peak is not None:
                marks.append((clock.to_reference(peak), "▲", f"bold {colour}"))
            lanes[run.rank_label(rank)] = marks
    return lanes


def imbalance_cells(row: ImbalanceRow) -> tuple:
    """One DataTable row (the columns of ``probes.ranks.IMBALANCE_COLUMNS``)."""
    first = "-" if row.first_peak_rank is None else f"r{row.first_peak_rank} @{row.first_peak_t:.2f}s"
    skew = "-" if row.step_skew_max_s is None else f"{_ms(row.step_skew_median_s)}/{_ms(row.step_skew_max_s)}"
    feet = " / ".join("-" if f is None else f"{f / 2**20:,.1f}" for f in row.footprints)
    return (row.run, row.phase, feet, "-" if row.imbalance is None else f"{row.imbalance:.3f}",
            "-" if row.max_rank is None else f"r{row.max_rank}", "-" if row.min_rank is None else f"r{row.min_rank}",
            first, _ms(row.peak_spread_s), skew)


class RanksView(Vertical):
    """The Ranks tab. Reads the rank runs on screen (``SessionSet.runs``) and the live launcher's output."""

    def compose(self) -> ComposeResult:
        yield Static(id="ranks-header")
        yield MemoryChart(id="ranks-chart")
        yield Lane(id="ranks-lane")
        yield Static(Text.assemble(glossary_link("ranks"), ("  imbalance across ranks per phase (max(active+cache) in "
                                                            "the phase; times on rank 0's clock)", "bold")),
                     id="ranks-title")
        table = DataTable(id="ranks-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*IMBALANCE_COLUMNS)
        yield table
        yield Static(id="ranks-log")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw from ``frame`` (called by the app's refresh timer while this tab is visible)."""
        log = getattr(self.app, "launcher_output", lambda: [])()
        counts = tuple((len(m.samples), len(m.events), m.complete) for m in frame.sessions.sessions.values())
        if unchanged(self, (frame_key(frame), counts, len(frame.sessions.runs), tuple(log), self.size)):
            return
        self.query_one("#ranks-header", Static).update(self._header(frame))
        self.query_one(MemoryChart).draw(lane_series(frame))
        self.query_one(Lane).show(frame.sessions.duration() or 1.0, peak_lanes(frame), frame.cursor)
        table = self.query_one("#ranks-table", DataTable)
        row = table.cursor_row
        table.clear()
        table.add_rows([imbalance_cells(r) for run in frame.sessions.runs for r in imbalance_rows(run)])
        if 0 <= row < table.row_count:
            table.move_cursor(row=row)
        self.query_one("#ranks-log", Static).update(Text("\n".join(log[-LOG_LINES:]), style="dim",
                                                         no_wrap=True, overflow="ellipsis"))

    @staticmethod
    def _header(frame: ViewState) -> Text:
        parts = [run_header(run) for run in frame.sessions.runs]
        in_runs = {id(m) for run in frame.sessions.runs for m in run.sessions}
        parts += [line for m in frame.sessions.sessions.values() if id(m) not in in_runs
                  for line in [alone_line(m)] if line is not None]
        if not parts:
            return Text("no rank recordings on screen: open a distributed run's directory (slabscope --open DIR, "
                        "or Enter on a rank file in Sessions), or start one with n and ranks > 1", style="dim")
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(parts)
        text.no_wrap, text.overflow = True, "ellipsis"
        return text
