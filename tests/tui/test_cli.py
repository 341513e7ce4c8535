"""`slabscope` (no command) -> tui, `slabscope tui` options, `slabscope web` (textual-serve command line)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pytest
from tui_paths import SAMPLE_SLAB

import app.commands.tui as tui_cmd
import app.commands.web as web_cmd
from app import cli


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def test_no_command_opens_the_tui(monkeypatch):
    seen = {}
    monkeypatch.setattr(tui_cmd, "main", lambda args: seen.setdefault("args", args) and 0)
    assert cli.main([]) == 0
    args = seen["args"]
    assert args.command == "tui" and args.backends == ["slab", "dense"] and args.gate == 1.15 and args.open == []


def test_tui_options_parse_and_build_app_options(tmp_path):
    args = parse("tui", "--scenario", "churn", "--model", "synthetic:tiny-llama", "--backends", "slab,dense,monolithic",
                 "--block-size", "16", "--slab-blocks", "64", "--gate", "1.2", "--recordings", str(tmp_path),
                 "--open", str(SAMPLE_SLAB))
    opts = tui_cmd.build_options(args)
    assert (opts.scenario, opts.model, opts.backends, opts.pool.block_size, opts.pool.slab_blocks, opts.gate) == (
        "churn", "synthetic:tiny-llama", ["slab", "dense", "monolithic"], 16, 64, 1.2)
    assert opts.open_paths == [SAMPLE_SLAB] and opts.recordings_dir == tmp_path and opts.autostart


def test_open_lists_the_recordings_next_to_it():
    assert tui_cmd.build_options(parse("tui", "--open", str(SAMPLE_SLAB))).recordings_dir == SAMPLE_SLAB.parent


def test_default_scenario_comes_from_the_workloads():
    from app.workloads.scenarios import DEFAULT_SCENARIO

    assert tui_cmd.build_options(parse("tui", "--no-start")).scenario == DEFAULT_SCENARIO


@pytest.mark.parametrize("argv", [["--backends", "slab,paged"], ["--backends", "slab,slab"], ["--backends", ""],
                                  ["--block-size", "0"], ["--slab-blocks", "-3"]])
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse("tui", *argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_missing_recording_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no such recording"):
        tui_cmd.build_options(parse("tui", "--open", str(tmp_path / "nope.slabrec")))


def test_corrupt_recording_is_one_line_before_the_tui_starts(tmp_path):
    bad = tmp_path / "bad.slabrec"
    bad.write_bytes(b"garbage, not a session")
    with pytest.raises(SystemExit, match="not a slabscope recording") as exc:
        tui_cmd.build_options(parse("tui", "--open", str(bad)))
    assert "\n" not in str(exc.value.code)


def test_web_serves_the_same_tui_command(monkeypatch):
    made = {}

    class FakeServer:
        def __init__(self, command, host, port, title, public_url):
            made.update(command=command, host=host, port=port, title=title)

        def serve(self):
            made["served"] = True

    import textual_serve.server

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    args = parse("web", "--port", "8123", "--backends", "slab,monolithic", "--slab-blocks", "16",
                 "--open", str(SAMPLE_SLAB))
    assert web_cmd.main(args) == 0
    argv = shlex.split(made["command"])
    assert argv[:4] == [sys.executable, "-m", "app", "tui"]
    assert argv[argv.index("--backends") + 1] == "slab,monolithic" and argv[argv.index("--slab-blocks") + 1] == "16"
    assert Path(argv[argv.index("--open") + 1]) == SAMPLE_SLAB
    assert made["port"] == 8123 and made["served"]
