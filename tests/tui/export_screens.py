"""Export SVG screenshots of every view, replaying the sample sessions shipped in assets/recordings/ (the Memory and
Sessions views at the end, where a replay opens; the pool views at the peak-footprint moment, P), plus the memory view at 80x24 and in the light theme. With ``--live SECONDS`` it instead
starts the default live run (embedded SmolLM2, default scenario, slab and dense workers), pauses the view after
that many seconds and exports every view of the live data (``live-*`` files). With ``--ranks`` it exports the
rank recordings of a 2-rank CPU run (tests/tui/rank_recordings/) opened as one run (``ranks-*`` files). With
``--guide`` it exports the README's "Reading the dashboard" pictures (``guide-*`` files): the README's first replay
command's first screen at 160x48 and 80x24, the pool views at the CPU sample's peak, Sessions browsing the shipped
recordings, Ranks, the glossary, and the web view as PNG from headless Chromium (tests/tui/web_browser.py).

    .venv/bin/python tests/tui/export_screens.py OUT_DIR [--live SECONDS | --gpu | --ranks | --guide]
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tui_paths import SAMPLE_DENSE, SAMPLE_DIR, SAMPLE_SLAB  # noqa: E402

from app.tui.app import AppOptions, SlabscopeApp  # noqa: E402

SHOTS = [  # (file stem, keys, terminal size, theme)
    ("1-memory", "1", (120, 36), None),
    ("2-slabs", "P2", (120, 36), None),
    ("3-fragmentation", "P3", (120, 36), None),
    ("4-gather", "P4", (120, 36), None),
    ("5-fused", "P5", (120, 36), None),
    ("6-inspector", "P6>jjeeu", (120, 36), None),
    ("7-sessions", "7", (120, 36), None),
    ("8-help", "?", (120, 40), None),
    ("9-run-form", "n", (100, 30), None),
    ("10-memory-80x24", "1", (80, 24), None),
    ("11-slabs-light", "P2", (120, 36), "textual-light"),
    ("12-inspector-light-80x24", "P6jjeu", (80, 24), "textual-light"),
]
KEY_NAMES = {">": "greater_than_sign", "?": "question_mark"}
README_GPU = [Path("assets/recordings/gpu") / f"distinct_burst-{b}.slabrec" for b in ("slab", "dense", "monolithic")]
GUIDE = [  # (file stem, recordings, Sessions folder, keys, terminal size)
    ("1-first-screen", README_GPU, None, "", (160, 48)),
    ("1-first-screen-80x24", README_GPU[:2], None, "", (80, 24)),
    ("2-slabs", None, None, "P2", (120, 36)),
    ("3-fragmentation", None, None, "P3", (120, 36)),
    ("4-gather", None, None, "P4", (120, 36)),
    ("5-fused", README_GPU, None, "5", (120, 36)),
    ("6-inspector", None, None, "P6>jjeeu", (120, 36)),
    ("7-sessions", None, Path("assets/recordings"), "7", (120, 36)),
    ("8-ranks", [Path("tests/tui/rank_recordings")], None, "8", (120, 40)),
    ("9-glossary", README_GPU, None, "g", (120, 40)),
]


GPU_DIR = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "gpu"


async def shoot(out: Path, stem: str, keys: str, size: tuple[int, int], theme: str | None,
                paths: list[Path] | None = None, folder: Path | None = None) -> Path:
    paths = paths or [SAMPLE_SLAB, SAMPLE_DENSE]
    app = SlabscopeApp(AppOptions(autostart=False, open_paths=paths,
                                  recordings_dir=folder or (paths[0] if paths[0].is_dir() else paths[0].parent)))
    async with app.run_test(size=size) as pilot:
        if theme:
            app.theme = theme
        await pilot.pause(0.3)
        for key in keys:
            await pilot.press(KEY_NAMES.get(key, key))
        app.clear_notifications()
        app.refresh_views()
        await pilot.pause(0.4)
        path = Path(app.save_screenshot(filename=f"slabscope-{stem}.svg", path=str(out)))
    return path


async def shoot_live(out: Path, seconds: float) -> list[Path]:
    """Every view of a real default live run, the view paused after ``seconds``."""
    from app.tui import sources

    app = SlabscopeApp(AppOptions(scenario=sources.default_scenario(), recordings_dir=out / "recordings"))
    paths = []
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(seconds)
        await pilot.press("space")  # freeze the view; the workers keep running
        for stem, keys in (("1-memory", "1"), ("2-slabs", "2"), ("3-fragmentation", "3"), ("4-gather", "4"),
                           ("5-fused", "5"), ("6-inspector", "6eu"), ("7-sessions", "7")):
            for key in keys:
                await pilot.press(key)
            app.clear_notifications()
            app.refresh_views()
            await pilot.pause(0.4)
            paths.append(Path(app.save_screenshot(filename=f"slabscope-live-{stem}.svg", path=str(out))))
        await pilot.press("q")
    return paths


def shoot_web(out: Path) -> Path:
    """The web view of the README's first replay command, as the browser shows it (PNG)."""
    from web_browser import WebDashboard

    web = WebDashboard([arg for path in README_GPU for arg in ("--open", str(path))], size=(1600, 900))
    try:
        web.wait_text("whole run: slab/dense", timeout=90)
        web.wait_text("? help", timeout=30)
        time.sleep(6)  # the "replaying ..." notification leaves after 5 s (a picture, not a test: no event to wait on)
        path = out / "slabscope-guide-10-web.png"
        path.write_bytes(web.screenshot())
    finally:
        web.close()
    return path


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screens")
    out.mkdir(parents=True, exist_ok=True)
    if "--guide" in sys.argv:  # run from the repository root: the pictures show paths relative to it
        for stem, paths, folder, keys, size in GUIDE:
            print(asyncio.run(shoot(out, f"guide-{stem}", keys, size, None, paths, folder)))
        print(shoot_web(out))
        return 0
    if "--gpu" in sys.argv:  # the H200 footprint-gate recordings (distinct_burst, slab/dense/monolithic)
        gpu = [GPU_DIR / f"distinct_burst-{b}.slabrec" for b in ("slab", "dense", "monolithic")]
        for stem, keys in (("1-memory", "1"), ("2-slabs", "P2"), ("4-gather", "P4"), ("5-fused", "5")):
            print(asyncio.run(shoot(out, f"gpu-{stem}", keys, (120, 36), None, gpu)))
        return 0
    if "--ranks" in sys.argv:  # a distributed run's rank recordings, merged
        from tui_rank_fixtures import RANK_DIR

        for stem, keys in (("8-ranks", "8"), ("1-memory", "1"), ("2-slabs-rank1", "2w")):
            print(asyncio.run(shoot(out, f"ranks-{stem}", keys, (120, 40), None, [RANK_DIR])))
        return 0
    if "--live" in sys.argv:
        seconds = float(sys.argv[sys.argv.index("--live") + 1])
        for path in asyncio.run(shoot_live(out, seconds)):
            print(path)
        return 0
    for stem, keys, size, theme in SHOTS:
        print(asyncio.run(shoot(out, stem, keys, size, theme)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
