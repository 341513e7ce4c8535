"""``slabscope web`` passes every dashboard option on, and says that each browser tab is its own run (issue 27,
finding 8: ``web --shrink compact`` was accepted and dropped)."""

from __future__ import annotations

import argparse
import asyncio
import shlex

from tui_helpers import wait_for

from app.cli import build_parser
from app.commands.tui import add_arguments
from app.commands.web import TABS_NOTE, tui_command
from app.tui.app import WEB_TAB_NOTE, AppOptions, SlabscopeApp


def _dashboard_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return parser


def _not_default(action: argparse.Action) -> list[str]:
    """Command-line words giving ``action`` a value other than its default."""
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction):
        return [flag]
    if isinstance(action, argparse._AppendAction):
        return [flag, "a b.slabrec", flag, "c.slabrec"]
    if action.choices:
        return [flag, next(str(c) for c in action.choices if c != action.default)]
    if action.dest == "backends":
        return [flag, "slab,monolithic"]
    if action.dest == "gate":
        return [flag, "1.3"]
    if action.type is not None and action.type is not str:
        return [flag, "3"]
    return [flag, "some value"]


def test_web_passes_every_dashboard_option_to_each_tabs_dashboard():
    """Every option of the dashboard, set to a value other than its default on ``web``, reaches the ``tui`` command
    each tab runs with that value (read back by the ``tui`` parser). Dropping one (the old --shrink) fails here."""
    actions = [a for a in _dashboard_parser()._actions if a.option_strings]
    words = [word for action in actions for word in _not_default(action)]
    web_args = build_parser().parse_args(["web", *words])
    command = shlex.split(tui_command(web_args))
    assert command[1:4] == ["-m", "app", "tui"]
    tab_args = _dashboard_parser().parse_args(command[4:])
    assert len(actions) >= 12
    for action in actions:
        assert getattr(tab_args, action.dest) == getattr(web_args, action.dest), action.dest
        assert getattr(tab_args, action.dest) != action.default, action.dest


def test_each_tab_says_it_is_its_own_run(tmp_path, fake_factory, monkeypatch):
    """``web --help`` says each tab is its own run, and a dashboard served to a browser tab says so when its live
    run starts."""
    assert TABS_NOTE in " ".join(build_parser()._subparsers._group_actions[0].choices["web"].description.split())
    monkeypatch.setattr(SlabscopeApp, "is_web", property(lambda self: True))

    async def go():
        app = SlabscopeApp(AppOptions(worker_factory=fake_factory, recordings_dir=tmp_path))
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: any(WEB_TAB_NOTE == n.message for n in app._notifications), timeout=10)

    asyncio.run(go())
