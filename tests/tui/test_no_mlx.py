"""The TUI process never imports mlx or mlx_lm: not when its modules load, not when the CLI parser is built, not when
it merges and follows rank recordings or checks a distributed run's choices, and not after a live run has started
(the real worker path; MLX lives in the spawned workers, and in ``record --ranks``'s processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tui_paths import HERE, ROOT

SCRIPT = textwrap.dedent("""
    import asyncio, json, sys, time
    sys.path.insert(0, {here!r})

    def heavy():
        return sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm"))

    def main():
        from app.cli import build_parser
        build_parser()
        import app.tui.app, app.commands.tui, app.commands.web  # noqa: F401
        at_import = heavy()
        from tui_real_workers import tiny_factory
        from tui_rank_fixtures import RANK_FILES
        from app.tui.app import AppOptions, SlabscopeApp
        from app.tui import sources
        from app.tui.screens.run_form import RunChoice
        from app.workloads.spec import PoolChoice
        from probes.follow import GrowingSession
        from probes.ranks import imbalance_rows

        # the distributed-run side: the form's checks, rank recordings merged, a growing file followed
        choice = RunChoice("churn", "synthetic:tiny-llama", ["slab"], PoolChoice(), 1.15, 2, "ring")
        assert sources.check_run_choice(choice) is None
        runs = sources.open_recordings([RANK_FILES[0].parent]).runs
        assert runs and all(imbalance_rows(run) for run in runs)
        GrowingSession.open(RANK_FILES[0]).refresh()

        async def run():
            app = SlabscopeApp(AppOptions(worker_factory=tiny_factory, recordings_dir="recs"))
            async with app.run_test(size=(80, 24)) as pilot:
                deadline = time.monotonic() + 60
                while not all(len(t.samples) for t in app.store.sessions.values()):
                    assert time.monotonic() < deadline, "no samples"
                    await pilot.pause(0.05)
                for key in "12345678":
                    await pilot.press(key)
                return sum(len(t.samples) for t in app.store.sessions.values())

        samples = asyncio.run(run())
        print(json.dumps({{"at_import": at_import, "after_run": heavy(), "samples": samples}}))

    if __name__ == "__main__":
        main()
""")


def test_tui_process_never_imports_mlx(tmp_path):
    script = tmp_path / "probe_tui.py"
    script.write_text(SCRIPT.format(here=str(HERE)))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["samples"] > 0
    assert result["at_import"] == [] and result["after_run"] == []
