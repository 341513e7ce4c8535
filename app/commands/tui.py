"""``slabscope tui`` (also ``slabscope`` with no command): the Textual dashboard.

By default it starts the default scenario on the embedded model with the ``slab`` and ``dense`` backends side by
side, each in its own worker process. ``--open`` replays recordings instead. Parser construction imports nothing
heavy; the app itself imports no mlx (the workers do).
"""

from __future__ import annotations

import argparse
from pathlib import Path

BACKENDS = ("slab", "dense", "monolithic")


def backends_arg(text: str) -> list[str]:
    """``slab,dense[,monolithic]`` -> list, rejecting unknown or repeated names."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in BACKENDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"backends must be a comma list of {', '.join(BACKENDS)}; got {text!r}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"backend listed twice in {text!r}")
    return names


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The dashboard's options (shared by ``tui`` and ``web``)."""
    p.add_argument("--scenario", default=None, help="scenario to run live (default: the workloads' default)")
    p.add_argument("--model", default="smollm2-135m", help="model name, synthetic:NAME or mlx-lm directory")
    p.add_argument("--backends", type=backends_arg, default=["slab", "dense"],
                   help="comma list of slab,dense,monolithic, each in its own worker (default slab,dense)")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default: scenario's)")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="blocks per slab (default: scenario's)")
    p.add_argument("--gate", type=float, default=1.15, help="slab/dense footprint ratio gate line (default 1.15)")
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
    """AppOptions from parsed arguments (validates --open paths)."""
    from app.tui.app import AppOptions
    from app.tui import sources

    scenario = args.scenario or sources.default_scenario()
    opts = AppOptions(scenario=scenario, model=args.model, backends=list(args.backends), block_size=args.block_size,
                      slab_blocks=args.slab_blocks, gate=args.gate, autostart=not args.no_start,
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
