"""``slabscope bench folder``: ``compare`` and ``report`` over a generated folder of many recordings (one recording
named N times), each in a fresh process: wall time and peak RSS (the child's own ``ru_maxrss``), median and range
over interleaved rounds. The speed and memory of reading a folder live here, not in the tests
(tests/probes/test_folder_streaming.py asserts the order and the one-file-at-a-time reading)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.bench.stats import spread

COMMANDS = ("compare", "report")


def make_folder(recording: Path, folder: Path, count: int) -> None:
    """``count`` names for ``recording`` in ``folder`` (hard links where the filesystem allows, else copies)."""
    folder.mkdir(parents=True)
    for index in range(count):
        path = folder / f"r{index:05d}.slabrec"
        try:
            os.link(recording, path)
        except OSError:
            shutil.copyfile(recording, path)


def run_once(command: str, folder: Path, scratch: Path) -> dict:
    """One fresh ``slabscope COMMAND folder``: wall seconds and the child's peak RSS (bytes)."""
    extra = ["--out", str(scratch / f"report-{time.monotonic_ns()}")] if command == "report" else []
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "app", command, str(folder), *extra], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    error = child.stderr.read().decode(errors="replace").strip().splitlines()
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{command} exited {child.returncode}: {error[-1] if error else ''}")
    return {"wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024}  # Linux reports KiB


def run_folder_bench(recording: Path, count: int, rounds: int, commands=COMMANDS, progress=None) -> dict:
    """Every command ``rounds`` times, interleaved (the order rotating each round), on a folder of ``count``."""
    say = progress or (lambda text: None)
    runs: dict = {command: [] for command in commands}
    with tempfile.TemporaryDirectory(prefix="slabscope-bench-folder-") as tmp:
        folder = Path(tmp) / "recordings"
        make_folder(recording, folder, count)
        order = list(commands)
        for index in range(rounds):
            shift = index % len(order)
            for command in order[shift:] + order[:shift]:
                runs[command].append(run_once(command, folder, Path(tmp)))
                run = runs[command][-1]
                say(f"round {index + 1} {command}: {run['wall_s']:.1f} s, peak RSS "
                    f"{run['peak_rss_bytes'] / 2**20:,.0f} MiB")
    stats = {command: {"wall_s": spread([r["wall_s"] for r in rs]),
                       "peak_rss_bytes": spread([r["peak_rss_bytes"] for r in rs])} for command, rs in runs.items()}
    return {"recording": str(recording), "recording_bytes": recording.stat().st_size, "files": count,
            "rounds": rounds, "runs": runs, "stats": stats}


def format_report(result: dict) -> str:
    lines = [f"bench folder: {result['files']:,} names for {result['recording']} ({result['recording_bytes']:,} B), "
             f"{result['rounds']} fresh process(es) per command, median [min-max]"]
    for command, stats in result["stats"].items():
        wall, rss = stats["wall_s"], stats["peak_rss_bytes"]
        lines.append(f"  {command:<8} wall {wall['median']:.1f} s [{wall['min']:.1f}-{wall['max']:.1f}]  peak RSS "
                     f"{rss['median'] / 2**20:,.0f} MiB [{rss['min'] / 2**20:,.0f}-{rss['max'] / 2**20:,.0f}]  "
                     f"({wall['median'] / result['files'] * 1e3:.1f} ms per file)")
    return "\n".join(lines)
