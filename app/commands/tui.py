"""``slabscope tui`` (also ``slabscope`` with no command): the Textual dashboard.

By default it starts the default scenario on the embedded model with the ``slab`` and ``dense`` backends side by
side, each in its own worker process. ``--open`` replays recordings instead. Parser construction imports nothing
heavy; the app itself imports no mlx (the workers do).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.arg_types import BACKENDS, SHRINK_MODES, backends_list, finite_float, positive_int
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
    p.add_argument("--open", action="append", default=[], metavar="RECORDING",
                   help="open a recorded session instead of running live (repeat to compare side by side)")
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

    scenario = args.scenario or sources.default_scenario()
    if args.scenario is not None or not args.open:  # a live run would start it
        check_scenario(scenario, args.model)
    opts = AppOptions(scenario=scenario, model=args.model, backends=list(args.backends), block_size=args.block_size,
                      slab_blocks=args.slab_blocks, gate=args.gate, shrink=args.shrink, autostart=not args.no_start,
                      open_paths=[Path(p) for p in args.open])
    if args.recordings:
        opts.recordings_dir = Path(args.recordings)
    elif opts.open_paths:
        opts.recordings_dir = opts.open_paths[0].parent  # the Sessions view lists what sits next to it
    missing = [str(p) for p in opts.open_paths if not p.is_file()]
    if missing:
        raise SystemExit(f"slabscope: no such recording: {', '.join(missing)}")
    for path in opts.open_paths:  # a corrupt or foreign file: one line here, not a TUI that opens on an error
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
