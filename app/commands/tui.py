"""``slabscope tui`` (also ``slabscope`` with no command): the Textual dashboard.

By default it starts the default scenario on the embedded model with the ``slab`` and ``dense`` backends side by
side, each in its own worker process; ``--ranks N`` runs it tensor parallel across N ranks instead (``record --ranks``
in the background, its rank recordings followed live). ``--open`` replays recordings (files or directories; the
rank recordings of a distributed run open as one run). Parser construction imports nothing heavy; the app itself
imports no mlx (the workers do).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.arg_types import BACKENDS, SHRINK_MODES, backends_list, finite_float, positive_int
from app.workloads.launch import LAUNCH_BACKENDS
from app.commands.errors import UsageError

__all__ = ["BACKENDS", "add_arguments", "add_parser", "build_options", "check_recording", "check_scenario", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The dashboard's options (shared by ``tui`` and ``web``)."""
    p.add_argument("--scenario", default=None, help="scenario to run live (default: the workloads' default)")
    p.add_argument("--model", default="smollm2-135m", help="model name, synthetic:NAME or mlx-lm directory")
    p.add_argument("--backends", type=backends_list, default=["slab", "dense"],
                   help="comma list of slab,dense,monolithic, each in its own worker (default slab,dense)")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default: scenario's)")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="blocks per slab (default: scenario's)")
    p.add_argument("--shrink", choices=SHRINK_MODES, default="off",
                   help="live runs' pool shrink policy: off, release (drop all-free highest slabs), compact (also "
                        "move live blocks down); default off")
    p.add_argument("--gate", type=finite_float(0.0, above=True), default=1.15,
                   help="slab/dense footprint ratio gate line (default 1.15)")
    p.add_argument("--ranks", type=positive_int, default=1, metavar="N",
                   help="run live tensor parallel across N ranks (record --ranks; every rank recorded; default 1)")
    p.add_argument("--launch-backend", choices=LAUNCH_BACKENDS, default="ring",
                   help="mx.distributed backend for --ranks (default ring)")
    p.add_argument("--open", action="append", default=[], metavar="RECORDING",
                   help="open a recorded session or a directory of them instead of running live (repeat to compare "
                        "side by side; a distributed run's rank recordings open as one run)")
    p.add_argument("--recordings", default=None, metavar="DIR",
                   help="where recordings are saved and listed (default $SLABSCOPE_RECORDINGS or ./recordings)")
    p.add_argument("--no-start", action="store_true", help="open the dashboard without starting a run")


def add_parser(sub) -> None:
    p = sub.add_parser("tui", help="the dashboard (default command): live slab vs dense, occupancy, replay")
    add_arguments(p)
    p.set_defaults(func=main)


def build_options(args: argparse.Namespace):
    """AppOptions from parsed arguments (validates --open paths, and the scenario a live run would start)."""
    from app.tui.app import AppOptions
    from app.tui import sources
    from app.workloads.spec import PoolChoice

    scenario = args.scenario or sources.default_scenario()
    if args.scenario is not None or not args.open:  # a live run would start it
        check_scenario(scenario, args.model)
    opts = AppOptions(scenario=scenario, model=args.model, backends=list(args.backends),
                      pool=PoolChoice(args.block_size, args.slab_blocks, args.shrink), gate=args.gate, ranks=args.ranks,
                      launch_backend=args.launch_backend, autostart=not args.no_start,
                      open_paths=[Path(p) for p in args.open])
    if args.ranks > 1 and not args.open:
        check_ranks(opts)
    if args.recordings:
        opts.recordings_dir = Path(args.recordings)
    elif opts.open_paths:  # the Sessions view lists what sits next to (or in) it
        first = opts.open_paths[0]
        opts.recordings_dir = first if first.is_dir() else first.parent
    missing = [str(p) for p in opts.open_paths if not p.exists()]  # a FIFO or a device: check_recording says so
    if missing:
        raise SystemExit(f"slabscope: no such recording: {', '.join(missing)}")
    for path in opts.open_paths:  # a corrupt or foreign file: one line here, not a TUI that opens on an error
        if path.is_dir():
            check_recording_dir(path)
        else:
            check_recording(path)
    if args.gate <= 0:
        raise SystemExit("slabscope: --gate must be > 0")
    return opts


def check_scenario(scenario: str, model: str) -> None:
    """UsageError (exit 2, before the TUI starts) for an unknown or invalid scenario, an unknown model, or a
    scenario longer than the model's positions (mlx-free: names and TOML files only)."""
    from app.models.registry import max_positions
    from app.workloads.limits import check_fits_context
    from app.workloads.scenarios import load_scenario

    try:
        check_fits_context(load_scenario(scenario), max_positions(model), model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_ranks(opts) -> None:
    """UsageError (exit 2, before the TUI starts) when the model's heads do not split ``--ranks`` ways or the launch
    backend cannot run here (mlx-free)."""
    from app.tui.sources import check_run_choice

    problem = check_run_choice(opts)
    if problem:
        raise UsageError(problem)


def check_recording_dir(path: Path) -> None:
    """SystemExit (one line) for a directory holding no session file (unreadable files in it, and a distributed run
    missing a rank, are reported by the TUI, one line each, while it shows the rest)."""
    from app.tui.sources import expand_paths

    if not expand_paths([path]):
        raise SystemExit(f"slabscope: no recordings in {path}")


def check_recording(path: Path) -> None:
    """SystemExit with the recording's one-line error if ``path`` cannot be opened as a session (mlx-free)."""
    from probes.errors import RecordingError
    from probes.replay import Session

    try:
        Session.open(path)
    except RecordingError as exc:
        raise SystemExit(f"slabscope: {exc}") from None


def main(args: argparse.Namespace) -> int:
    from app.tui.app import SlabscopeApp

    app = SlabscopeApp(build_options(args))
    app.run()
    return int(app.return_code or 0)
