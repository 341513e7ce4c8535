"""Sessions view: the recordings in a folder, and its subfolders to browse into (``..`` goes up; Backspace too), opening
one (replay), a distributed run (Enter on any of its rank recordings opens every rank listed as one run) or several
side by side (compare), and a comparison table of whatever is on screen (the figures of ``probes.figures``:
footprint and its ratio to dense, RSS, busy and decode tok/s, slabs held, gather runs, fused-kernel declines, probe
cost)."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from app.tui.data import ViewState
from app.tui.sources import RecordingInfo, list_folders, list_recordings, recording_files
from app.tui.views import frame_key, unchanged
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE, human_bytes
from probes import figures
from probes.errors import RecordingError
from probes.store import SessionModel

LIST_COLUMNS = ("", "file", "backend", "scenario", "model", "duration", "size", "state")
L = figures.LABELS
COMPARE_COLUMNS = ("track", L["footprint"], "max RSS", L["footprint_ratio"], L["tok_s:busy"], L["tok_s:decode"],
                   L["slabs"], "reserved now", L["gather_runs"], L["declines"], L["probe_cost"])


def compare_rows(frame: ViewState) -> list[tuple]:
    """One row of figures per session, from its start up to the cursor (``probes.figures``; "reserved now" is the
    pool at the cursor)."""
    tracks = list(frame.sessions.sessions.values())
    rows = []
    for tr in tracks:
        # The baseline: the dense session (a rank: the same rank of the dense run), else the first one (two slab
        # sessions compared).
        dense = frame.sessions.baseline_of(tr) or (tracks[0] if frame.sessions.run_of(tr) is None else None)
        base = figures.peak_footprint(dense, None, frame.cursor_in(dense)) if dense else None
        cursor = frame.cursor_in(tr)
        peak = figures.peak_footprint(tr, None, cursor)
        rss = tr.peak("rss", None, cursor)
        ratio = figures.footprint_ratio(peak, base) if tr is not dense else None
        ratio_cell = Text("base" if tr is dense else figures.format_ratio(ratio),
                          style="dim" if ratio is None else OK_STYLE if ratio <= frame.gate else WARN_STYLE)
        snap = _snapshot(frame, tr)
        reserved = human_bytes(snap.stats.bytes_reserved) if snap is not None else "-"
        rows.append((tr.label, "-" if peak is None else human_bytes(peak),
                     "-" if rss.t is None else human_bytes(rss.value), ratio_cell,
                     figures.format_tok_s(figures.tok_s(tr, "busy", None, cursor)),
                     figures.format_tok_s(figures.tok_s(tr, "decode", None, cursor)),
                     figures.format_slabs(figures.slab_count(tr, None, cursor)), reserved,
                     figures.format_runs(figures.gather_runs(tr, None, cursor)),
                     figures.format_declines(figures.declines(tr, None, cursor)),
                     figures.format_probe_cost(figures.probe_cost(tr))))
    return rows


def _snapshot(frame: ViewState, model: SessionModel):
    """The session's full pool snapshot at the cursor (None without a pool, or when its op log does not replay:
    reported once by the app)."""
    if not model.is_pool:
        return None
    try:
        return model.snapshot_at(frame.cursor_in(model))
    except RecordingError as exc:
        frame.sessions.problems.setdefault(model.label, str(exc))
        return None


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it (shorter on screen), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


class SessionsView(Vertical):
    """The Sessions tab. Owns the listed directory and the set of marked recordings."""

    BINDINGS = [
        # listed on the view's header line and by ?, not in the footer (it keeps the app's keys at 80 columns)
        Binding("enter", "open_highlighted", "open", show=False),
        Binding("backspace", "folder_up", "parent folder", show=False),
        Binding("m", "mark", "mark for compare", show=False),
        Binding("c", "open_marked", "compare marked", show=False),
        Binding("f5", "rescan", "rescan", show=False),
    ]

    class OpenRecordings(Message):
        """Ask the app to load these session files (one = replay, several = side by side); ``run``: they are the
        rank recordings of one distributed run (a missing rank is an error even when only one file is there)."""

        def __init__(self, paths: list[Path], run: bool = False) -> None:
            super().__init__()
            self.paths = paths
            self.run = run

    def __init__(self, directory: Path, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.directory = Path(directory)
        self.infos: list[RecordingInfo] = []
        self.folders: list[Path] = []  # listed above the recordings: the parent (..) first, then subfolders
        self.marked: set[Path] = set()
        self.listing = None  # app.tui.opening.BackgroundOpen while a large directory is listed
        self._keep_cursor = False  # the listing under way keeps the cursor where it was (F5), or resets it

    def compose(self) -> ComposeResult:
        yield Static(id="sessions-header")
        listing = DataTable(id="sessions-list", zebra_stripes=True, cursor_type="row")
        listing.add_columns(*LIST_COLUMNS)
        yield listing
        yield Static(Text("on screen now (compare; ratio vs the dense session, else the first):", style="bold"),
                     id="compare-title")
        table = DataTable(id="compare-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*COMPARE_COLUMNS)
        yield table

    def on_mount(self) -> None:
        self._list(keep_cursor=False)

    def on_unmount(self) -> None:
        if self.listing is not None:
            self.listing.cancel()

    def set_directory(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._list(keep_cursor=False)

    def action_rescan(self) -> None:
        """Re-list the folder: its parent and subfolders, then its session files (the cursor stays where it is)."""
        self._list(keep_cursor=True)

    def _list(self, keep_cursor: bool) -> None:
        """List the folder: its parent and subfolders at once, then its session files (many of them: off the UI
        thread, app/tui/opening.py); a new listing's cursor lands on its newest recording (else on ``..``)."""
        from app.tui.opening import BackgroundOpen, in_background

        if self.listing is not None:
            self.listing.cancel()
            self.listing = None
        self.folders, self._keep_cursor = list_folders(self.directory), keep_cursor
        files = recording_files(self.directory)
        if not in_background(files):
            self._listed(list_recordings(self.directory, files=files))
            return
        self.listing = BackgroundOpen(self.app, [self.directory], files, False, self._listed, self._listing_step,
                                      listing=True).start()
        self._listing_step(0, len(files))

    def _listing_step(self, count: int, total: int) -> None:
        self.query_one("#sessions-header", Static).update(
            Text(f"recordings in {shown_path(self.directory)}/  listing {count:,}/{total:,}…", style="bold"))

    def _listed(self, infos: list[RecordingInfo]) -> None:
        self.listing, self.infos = None, infos
        self._fill_listing()
        if not self._keep_cursor:
            self.query_one("#sessions-list", DataTable).move_cursor(row=len(self.folders) if self.infos else 0)

    def action_folder_up(self) -> None:
        parent = self.directory.resolve().parent
        if parent != self.directory.resolve():
            self.set_directory(parent)

    def _fill_listing(self) -> None:
        table = self.query_one("#sessions-list", DataTable)
        keep = table.cursor_row
        table.clear()
        for folder in self.folders:
            name = ".." if folder == self.directory.resolve().parent else f"{folder.name}/"
            table.add_row("▸", name, Text("folder", style="dim"), "", "", "", "", "")
        for info in self.infos:
            state = Text(info.error, style=WARN_STYLE) if info.error else \
                Text(f"damaged: {info.damage}", style=WARN_STYLE) if info.damage else \
                ("complete" if info.complete else "partial")
            backend = f"{info.backend} {info.rank}" if info.rank else info.backend
            table.add_row("●" if info.path in self.marked else " ", info.path.name, backend, info.scenario,
                          info.model, f"{info.duration:.1f}s", human_bytes(info.size), state)
        if 0 <= keep < table.row_count:
            table.move_cursor(row=keep)
        header = Text(f"recordings in {shown_path(self.directory)}/  ", style="bold")
        header.append("enter: open (a folder: go in; a rank: its whole run)  backspace: up  m: mark  c: open "
                      "marked  F5: rescan  ", style="dim")
        header.append_text(glossary_link("sessions"))
        if not self.infos:
            header.append("\n(no session files here yet: press R during a live run to record)", style="dim")
        self.query_one("#sessions-header", Static).update(header)

    def _highlighted(self) -> RecordingInfo | None:
        row = self.query_one("#sessions-list", DataTable).cursor_row - len(self.folders)
        return self.infos[row] if 0 <= row < len(self.infos) else None

    def _highlighted_folder(self) -> Path | None:
        row = self.query_one("#sessions-list", DataTable).cursor_row
        return self.folders[row] if 0 <= row < len(self.folders) else None

    def action_mark(self) -> None:
        info = self._highlighted()
        if info is not None:
            self.marked ^= {info.path}
            self._fill_listing()

    def action_open_highlighted(self) -> None:
        """Open the highlighted recording (a rank recording opens with every rank of its run listed here), or go
        into the highlighted folder."""
        folder = self._highlighted_folder()
        if folder is not None:
            self.set_directory(folder)
            return
        info = self._highlighted()
        if info is not None:
            run = [i.path for i in self.infos if info.run_id and i.run_id == info.run_id]
            self.post_message(self.OpenRecordings(run or [info.path], run=bool(run)))

    def action_open_marked(self) -> None:
        paths = [i.path for i in self.infos if i.path in self.marked]
        if paths:
            self.post_message(self.OpenRecordings(paths))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "sessions-list":
            event.stop()
            self.action_open_highlighted()

    def refresh_view(self, frame: ViewState) -> None:
        """Refresh the comparison table of the sessions on screen."""
        counts = tuple((len(t.samples), len(t.snapshots)) for t in frame.sessions.sessions.values())
        if unchanged(self, (frame_key(frame), counts)):
            return
        table = self.query_one("#compare-table", DataTable)
        table.clear()
        table.add_rows(compare_rows(frame))
