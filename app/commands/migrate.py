"""``slabscope migrate OLD NEW``: rewrite a format-v1 or v2 recording as the current format, v3 (smaller, faster to
open), checked record by record against the original (``probes.migrate``)."""

from __future__ import annotations

import statistics
import subprocess
import sys

from app.commands.arg_types import positive_int
from app.commands.errors import output_file

OPEN_ALL = ("import sys, time; from probes.replay import Session; t = time.perf_counter(); s = Session.open(sys.argv[1]);"
            " s.all_ops(); s.snapshot_at(s.duration / 2); print(time.perf_counter() - t)")


def add_parser(sub) -> None:
    p = sub.add_parser("migrate", help="rewrite a format-v1 or v2 recording as format v3",
                       description="Decodes every record of a v1 or v2 recording and writes it again as v3 (typed "
                       "msgpack payloads, record numbers and a session tag; keyframes hold the pool's rows once, "
                       "not once per layer), then checks that the copy shows the same samples, events, ops and pool "
                       "states. Older files stay readable; v3 ones are smaller.")
    p.add_argument("old", help="a format-v1 or v2 recording (.slabrec)")
    p.add_argument("new", help="the v3 file to write (a new file unless --force; never OLD itself)")
    p.add_argument("--force", action="store_true",
                   help="replace NEW when it exists (never OLD itself: same file by path, symlink or hard link)")
    p.add_argument("--time", type=positive_int, default=None, metavar="ROUNDS",
                   help="also time opening each file (open, op log, the pool rebuilt at the middle) in a fresh "
                        "process, ROUNDS interleaved rounds after a warm-up; prints median and range")
    p.set_defaults(func=main)


def main(args) -> int:
    from probes.errors import RecordingError
    from probes.format import FORMAT_VERSION
    from probes.migrate import migrate

    output_file(args.new, "new")
    try:
        done = migrate(args.old, args.new, force=args.force)
    except RecordingError as exc:  # (OutputError, a refused or failed write: one line, exit 1, in app.cli)
        print(f"slabscope migrate: {exc}", file=sys.stderr)
        return 1
    labels = (f"v{done.from_version}", f"v{FORMAT_VERSION}")
    print(f"{args.old}: {done.before:,} bytes ({labels[0]}) -> {args.new}: {done.after:,} bytes ({labels[1]}), "
          f"{done.after / done.before - 1:+.1%}; samples, events, snapshot summaries, ops and the pool at every "
          "snapshot instant checked equal")
    if args.time:
        for label, times in _open_times([args.old, args.new], labels, args.time).items():
            ms = [1e3 * t for t in times]
            print(f"open + op log + pool at the middle, fresh process ({label}): median {statistics.median(ms):.1f} ms "
                  f"[{min(ms):.1f}, {max(ms):.1f}] over {len(ms)} rounds")
    return 0


def _open_times(paths: list[str], labels: tuple[str, str], rounds: int) -> dict[str, list[float]]:
    """Seconds to open each file and read everything a view needs, each round in a fresh interpreter (imports not
    counted), the files alternating; round 0 is a warm-up."""
    out: dict[str, list[float]] = {label: [] for label in labels}
    for index in range(rounds + 1):
        for label, path in zip(labels, paths):
            result = subprocess.run([sys.executable, "-c", OPEN_ALL, path], capture_output=True, text=True,
                                    check=True)
            if index:
                out[label].append(float(result.stdout.strip()))
    return out
