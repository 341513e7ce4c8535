"""``slabscope record --ranks N``: the recording, tensor parallel across N ranks through ``mlx.launch``.

Each backend is one launch of N ranks (one after another), each rank writing
``DIR/<scenario>-<backend>-rank<k>.slabrec``; then every rank's outcome (from its recording and what the launcher
said) and the merged compare (``app.commands.compare_ranks``). A model whose heads do not split N ways, a bad
hostfile or a missing launcher is a one-line error before anything starts. Parser construction imports no mlx.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from dataclasses import dataclass

DEFAULT_PEER_TIMEOUT_S = 120.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stopped(Exception):
    """``record`` was told to stop (SIGTERM, SIGHUP, Ctrl-C, or its parent is gone): the current launch's ranks are
    stopped (they record why) and no further backend starts."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals() -> dict:
    """Turn the stop signals into ``Stopped`` in the main thread (the launcher runs in its own process group, so a
    signal to ``record`` alone would leave it and its ranks running); returns the handlers it replaced. One stop:
    a second signal is ignored while the ranks are being stopped."""
    def handler(signum, _frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def watch_parent() -> None:
    """Send this process SIGTERM when its parent is gone (a TUI that was killed), so its ranks stop with it."""
    from app.workloads.parent_watch import ParentWatch

    ParentWatch(os.getppid(), lambda _text: os.kill(os.getpid(), signal.SIGTERM), grace_s=60.0).start()


def add_arguments(p) -> None:
    """The distributed flags of ``record`` (added to its parser)."""
    from app.workloads.launch import LAUNCH_BACKENDS

    g = p.add_argument_group("distributed (tensor parallel through mlx.launch; see docs/distributed.md)")
    g.add_argument("--ranks", type=int, default=None, metavar="N",
                   help="run every backend tensor parallel across N ranks, one recording per rank")
    g.add_argument("--launch-backend", choices=LAUNCH_BACKENDS, default=None,
                   help="mx.distributed backend mlx.launch sets up (default ring; nccl for CUDA GPUs)")
    g.add_argument("--hostfile", default=None, help="mlx.launch hostfile: one rank per host, across machines")
    g.add_argument("--peer-timeout", type=float, default=DEFAULT_PEER_TIMEOUT_S, metavar="S",
                   help="a rank with no progress for S seconds stops with an error (a peer died or hangs)")
    g.add_argument("--sync-interval", type=float, default=2.0, metavar="S",
                   help="seconds between clock/step syncs of the ranks (default 2)")
    g.add_argument("--stop-with-parent", action="store_true",
                   help="stop every rank when the process that started record is gone (the TUI's live runs)")


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    path: str
    ok: bool
    text: str


def rank_template(out: str, stem: str, backend: str) -> str:
    return os.path.join(os.path.abspath(out), f"{stem}-{backend}-rank{{rank}}.slabrec")


def _check(args) -> str | None:
    """The one-line reason this distributed record cannot start, or None."""
    from app.models.geometry import declared_geometry, shard_problem

    if args.together:
        return "--together and --ranks exclude each other (ranks of one backend already run together)"
    if args.ranks < 1:
        return f"--ranks must be >= 1, got {args.ranks}"
    if not (args.peer_timeout > 0 and args.sync_interval > 0):  # NaN fails too
        return "--peer-timeout and --sync-interval must be > 0"
    if args.launch_backend == "nccl" and args.device == "cpu":
        return "the nccl backend runs on CUDA GPUs: use --device gpu"
    return shard_problem(declared_geometry(args.model), args.ranks, args.model)


def _plan(args):
    from app.workloads.launch import LaunchPlan

    backend = args.launch_backend or "ring"
    return LaunchPlan(ranks=args.ranks, backend=backend, hostfile=args.hostfile)


def outcomes(template: str, ranks: int, launch) -> list[RankOutcome]:
    """Every rank's end, from its recording (complete, error, incomplete, absent) and the launcher's words."""
    from probes.errors import RecordingError
    from probes.replay import Session

    out = []
    for rank in range(ranks):
        path = template.format(rank=rank)
        said = launch.launcher_notes.get(rank)
        if not os.path.exists(path):
            why = launch.failures.get(rank) or said or "not on this host (ranks on other hosts write there)"
            out.append(RankOutcome(rank, path, False, f"no recording: {why}"))
            continue
        try:
            session = Session.open(path)
        except RecordingError as exc:
            out.append(RankOutcome(rank, path, False, f"unreadable: {exc.problem}"))
            continue
        error = (session.summary.summary if session.summary is not None else {}).get("error")
        if not session.complete:
            text = f"incomplete (readable prefix of {session.duration:.1f} s): the rank died without closing it"
            out.append(RankOutcome(rank, path, False, text + (f"; mlx.launch: {said}" if said else "")))
        elif error:
            out.append(RankOutcome(rank, path, False, f"stopped: {error}"))
        else:
            out.append(RankOutcome(rank, path, True, "ok"))
    return out


def prepare(args):
    """(LaunchPlan, RunSpecs) for a distributed record; ValueError/LaunchError (one line) when it cannot start.
    Changes nothing (no directory, no process)."""
    from app.commands.record_specs import run_specs

    from app.workloads.hosts import check_hostfile_hosts

    problem = _check(args)
    if problem:
        raise ValueError(problem)
    plan = _plan(args)
    if plan.hostfile is not None:  # every remote host resolvable before anything starts (bounded)
        check_hostfile_hosts(plan.hostfile)
    specs = run_specs(args, list(args.backends))  # parsed, each backend once (app.commands.arg_types)
    if plan.backend == "nccl" and args.device is None:  # NCCL moves GPU buffers: every rank on its GPU
        specs = [_with(spec, device="gpu") for spec in specs]
    return plan, specs


def main(args) -> int:
    from app.workloads.launch import RankLaunch, launch_command

    try:
        plan, specs = prepare(args)
    except ValueError as exc:  # LaunchError and ScenarioError are ValueErrors
        print(f"slabscope record: {exc}", file=sys.stderr)
        return 2
    from app.commands.errors import output_dir

    output_dir(args.out, "--out")
    _check_rank_files(args, plan, specs)  # each rank creates its file exclusively; refused here before any launch
    specs = [_with(spec, record_force=args.force) for spec in specs]
    failed, paths, stopped = False, [], None
    replaced = stop_on_signals() if _main_thread() else {}
    try:
        if args.stop_with_parent:
            watch_parent()
        for spec in specs:
            template = rank_template(args.out, os.path.splitext(os.path.basename(spec.scenario))[0], spec.backend)
            command = launch_command(plan, _with(spec, record_path=None), record_template=template,
                                     run_id=uuid.uuid4().hex[:12], peer_timeout=args.peer_timeout,
                                     sync_interval=args.sync_interval)
            launch = RankLaunch(command, grace_s=args.peer_timeout + 5.0, hosts=_hosts(plan))
            try:
                code = launch.start().wait(args.timeout)
            except Stopped as stop:  # the ranks are stopped (wait() does it too when the signal lands there)
                launch.stop(f"stopped by {stop}")
                stopped, code = stop, launch.returncode
            ends = outcomes(template, plan.ranks, launch)
            ok = code == 0 and all(e.ok for e in ends) and stopped is None
            failed |= not ok
            print(f"{spec.backend}: {plan.ranks} ranks via mlx.launch ({plan.backend}): "
                  + ("ok" if ok else f"FAILED (launcher exit {code}{'; ' + launch.killed if launch.killed else ''})"))
            for end in ends:
                print(f"  rank {end.rank}: {end.path} ({end.text})")
            paths += [e.path for e in ends if os.path.exists(e.path)]
            if stopped is not None:
                break
    except Stopped as stop:  # between two launches: no rank is running
        stopped = stop
    finally:
        for sig, previous in replaced.items():
            signal.signal(sig, previous)
    if stopped is not None:
        print(f"slabscope record: stopped by {stopped}: every rank was stopped, no further backend started")
    if paths:
        from app.commands.compare_ranks import print_merged

        print_merged(paths)
    return 128 + stopped.signum if stopped is not None else 1 if failed else 0


def _check_rank_files(args, plan, specs) -> None:
    """``OutputError`` (one line, exit 1) when a rank's recording path exists (unless ``--force``) or names the
    scenario file: refused before any rank starts."""
    from app.commands.outputs import scenario_inputs
    from probes.outfile import check_target

    for spec in specs:
        template = rank_template(args.out, os.path.splitext(os.path.basename(spec.scenario))[0], spec.backend)
        for rank in range(plan.ranks):
            check_target(template.format(rank=rank), args.force, scenario_inputs(args.scenario))


def _hosts(plan) -> dict[int, str] | None:
    """rank -> ssh name of a hostfile launch (None on one host: no rank goes through ssh)."""
    from app.workloads.hosts import hostfile_hosts

    return None if plan.hostfile is None else {host.rank: host.ssh for host in hostfile_hosts(plan.hostfile)}


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _with(spec, **changes):
    import dataclasses

    return dataclasses.replace(spec, **changes)
