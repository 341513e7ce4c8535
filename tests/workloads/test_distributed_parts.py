"""The parts of a distributed recording that need no second rank: the pre-launch checks and their one-line errors,
the launcher command (ring and the NCCL wiring that cannot run here), the clock/lockstep arithmetic, the shard
map, and the rank watchdog (in a subprocess: it installs signal handlers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from app.cli import build_parser
from app.cli import main as cli_main
from app.models.geometry import declared_geometry, shard_problem
from app.models.gguf_metadata import gguf_metadata
from app.workloads.launch import LaunchError, LaunchPlan, hostfile_ranks, launch_command, launcher_command
from app.workloads.rank_sync import (RankDivergence, best_round, check_lockstep, measure_offset, next_sync_step)
from app.workloads.sharding import shard_map

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- pre-launch checks -------------------------------------------------------------------------------------------
def test_declared_geometry_reads_the_embedded_gguf_header_without_mlx():
    code = ("import sys; from app.models.geometry import declared_geometry as g; print(g('smollm2-135m')); "
            "assert 'mlx' not in sys.modules and 'mlx.core' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "n_heads=9, n_kv_heads=3, head_dim=64, intermediate_size=1536" in out and "num_layers=30" in out


def test_gguf_reader_rejects_foreign_files(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_metadata(bad)


@pytest.mark.parametrize("model, ranks, problem", [
    ("smollm2-135m", 2, "smollm2-135m (llama) has 3 KV heads, which do not split evenly across 2 ranks"),
    ("smollm2-135m", 3, None),
    ("synthetic:tiny-llama", 2, None),
    ("synthetic:tiny-llama", 4, "has 2 KV heads"),
    ("synthetic:qwen3-0.6b", 8, None),
    ("synthetic:qwen3-0.6b", 16, "has 8 KV heads"),
])
def test_shard_problem(model, ranks, problem):
    found = shard_problem(declared_geometry(model), ranks, model)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize("extra, message", [
    (["--ranks", "2", "--model", "smollm2-135m"], "has 3 KV heads, which do not split evenly across 2 ranks"),
    (["--ranks", "0", "--model", "synthetic:tiny-llama"], "--ranks must be >= 1"),
    (["--ranks", "2", "--model", "synthetic:tiny-llama", "--together"], "exclude each other"),
    (["--ranks", "2", "--model", "synthetic:tiny-llama", "--launch-backend", "nccl", "--device", "cpu"],
     "the nccl backend runs on CUDA GPUs"),
    (["--ranks", "2", "--model", "synthetic:tiny-llama", "--launch-backend", "jaccl"],
     "jaccl backend needs --hostfile"),
    (["--ranks", "2", "--model", "synthetic:tiny-llama", "--peer-timeout", "0"], "must be > 0"),
    (["--ranks", "2", "--model", "nosuch"], "unknown model"),
])
def test_record_ranks_refuses_before_launch_with_one_line(tmp_path, capsys, extra, message):
    out = tmp_path / "never"
    assert cli_main(["record", *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()  # nothing created, nothing started


def test_hostfile_must_list_one_host_per_rank(tmp_path, capsys):
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"]}]))
    assert hostfile_ranks(str(hostfile)) == 2
    assert cli_main(["record", "--ranks", "1", "--hostfile", str(hostfile), "--model", "synthetic:tiny-llama",
                     "--out", str(tmp_path / "o")]) == 2
    assert "lists 2 hosts but --ranks is 1" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(LaunchError, match="broken.json"):
        hostfile_ranks(str(tmp_path / "broken.json"))


# ---- the launcher command ----------------------------------------------------------------------------------------
def _prepared(*extra):
    from app.commands.record_ranks import prepare

    args = build_parser().parse_args(["record", "--model", "synthetic:qwen3-0.6b", "--out", "/nonexistent/x", *extra])
    return prepare(args)


def test_ring_command_on_one_host():
    plan, specs = _prepared("--ranks", "2", "--backends", "slab,dense", "--scenario", "churn")
    command = launch_command(plan, specs[0], record_template="/d/churn-slab-rank{rank}.slabrec", run_id="abc",
                             peer_timeout=30, sync_interval=2)
    assert os.path.basename(command[0]) == "mlx.launch"
    assert launcher_command() == [command[0]]
    head, tail = command[:command.index("--")], command[command.index("--") + 1:]
    assert head[head.index("--backend") + 1] == "ring" and head[head.index("-n") + 1] == "2"
    assert "--starting-port" in head and "--nccl-port" not in head
    assert f"OPENBLAS_NUM_THREADS={max(1, (os.cpu_count() or 1) // 2)}" in head
    assert tail[:2] == ["-m", "app.workloads.rank_main"]
    spec = json.loads(tail[tail.index("--spec") + 1])
    assert spec["backend"] == "slab" and spec["model"] == "synthetic:qwen3-0.6b"
    assert tail[tail.index("--world-size") + 1] == "2" and tail[tail.index("--launch-backend") + 1] == "ring"


def test_nccl_command_puts_every_rank_on_its_gpu(monkeypatch):
    """The path the lead runs on two H200s: NCCL rendezvous port, GPU device in every rank's spec; mlx.launch
    itself sets CUDA_VISIBLE_DEVICES=rank and NCCL_HOST_IP/NCCL_PORT/MLX_WORLD_SIZE."""
    import app.workloads.launch as launch

    monkeypatch.setattr(launch, "installed_mlx_build", lambda: ("cuda", "mlx-cuda-12"))  # as on the GPU host
    plan, specs = _prepared("--ranks", "2", "--launch-backend", "nccl", "--scenario", "distinct_burst",
                            "--dtype", "bfloat16", "--backends", "slab,dense")
    assert plan.backend == "nccl" and all(s.device == "gpu" and s.dtype == "bfloat16" for s in specs)
    command = launch_command(plan, specs[0], record_template="/d/r{rank}.slabrec", run_id="x", peer_timeout=120,
                             sync_interval=2)
    head = command[:command.index("--")]
    assert head[head.index("--backend") + 1] == "nccl" and "--nccl-port" in head and "--starting-port" not in head
    assert command[command.index("--launch-backend") + 1] == "nccl"


def test_hostfile_replaces_the_rank_count(tmp_path):
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"backend": "ring", "hosts": [{"ssh": "a", "ips": ["10.0.0.1"]},
                                                                 {"ssh": "b", "ips": ["10.0.0.2"]}]}))
    plan = LaunchPlan(ranks=2, hostfile=str(hostfile))
    args = plan.launcher_args()
    assert args[args.index("--hostfile") + 1] == str(hostfile) and "-n" not in args
    assert "--starting-port" not in args  # the hostfile's own ports
    assert not any(a.startswith("OPENBLAS_NUM_THREADS") for a in args)  # other hosts have their own cores


# ---- clock and lockstep arithmetic ----------------------------------------------------------------------------------
def _row(rounds, tail=(5, 100, 0xabc)):
    """One rank's row: per round (mono_ns, wall_ns, barrier_ns), then step, tokens, digest."""
    return [v for r in rounds for v in r] + list(tail)


def test_offset_comes_from_the_round_with_the_tightest_bound():
    rank0 = _row([(1_000_000, 5_000_000, 9_000), (2_000_000, 6_000_000, 400), (3_000_000, 7_000_000, 3_000)])
    rank1 = _row([(1_050_000, 5_000_000, 100), (2_030_000, 6_010_000, 300), (3_010_000, 7_000_000, 200)])
    assert best_round([rank0, rank1], 3) == 1  # slowest barriers per round: 9000, 400, 3000 ns
    measured = measure_offset([rank0, rank1], 3, rank=1)
    assert measured["offset_s"] == pytest.approx(-30e-6) and measured["bound_s"] == pytest.approx(400e-9)
    assert measured["spread_s"] == pytest.approx(40e-6)
    assert measured["wall_minus_mono_offset_s"] == pytest.approx(-10e-6 + 30e-6)
    assert measure_offset([rank0, rank1], 3, rank=0)["offset_s"] == 0.0


def test_lockstep_check_names_the_rank_that_diverged():
    same = _row([(1, 1, 1)])
    check_lockstep([same, list(same)], "step")
    with pytest.raises(RankDivergence, match=r"rank 1 at step 5 with 101 tokens"):
        check_lockstep([same, _row([(1, 1, 1)], tail=(5, 101, 0xabc))], "step")
    with pytest.raises(RankDivergence, match=r"outputs abd"):
        check_lockstep([same, same, _row([(1, 1, 1)], tail=(5, 100, 0xabd))], "end")


def test_next_sync_step_follows_rank_zeros_pace():
    assert next_sync_step(0, 10**9, None, 2.0) == 1
    assert next_sync_step(40, 2 * 10**9, (0, 10**9), 2.0) == 120  # 40 steps/s -> 80 steps from now
    assert next_sync_step(41, 2 * 10**9, (40, 2 * 10**9), 2.0) == 42  # no time passed: sync again next step


def test_shard_map_of_rank_one_of_two():
    smap = shard_map(rank=1, world_size=2, num_layers=28, n_kv_heads_total=8, n_heads_total=16, head_dim=128,
                     dtype="bfloat16", weight_bytes=123)
    assert smap["kv_heads"] == [4, 8] and smap["q_heads"] == [8, 16] and smap["layers"] == [0, 28]
    assert smap["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 2
    assert smap["kv_bytes_per_token_total"] == 2 * smap["kv_bytes_per_token"]


# ---- the watchdog (own process: it installs signal handlers) ----------------------------------------------------
WATCHDOG = """
import os, sys, threading, time
from app.workloads.rank_watchdog import RankWatchdog
def abort(text, code):
    print("ABORT", code, text, flush=True)
    os._exit(code)
dog = RankWatchdog(peer_timeout_s={timeout}, on_abort=abort, poll_s=0.02).install()
{arm}
print("ready", flush=True)
def report(quiet_for):  # once a check has seen (and let pass) quiet_for seconds of silence, say so
    deadline = time.monotonic() + 60
    while dog.checked_silence_s < quiet_for and time.monotonic() < deadline:
        time.sleep(0.01)
    print("quiet" if dog.checked_silence_s >= quiet_for else "never checked", flush=True)
if {quiet_for}:
    threading.Thread(target=report, args=({quiet_for},), daemon=True).start()
lock = threading.Lock(); lock.acquire(); lock.acquire()  # the main thread blocks like a rank in a collective
"""


def _watchdog_process(timeout: float, arm: str, quiet_for: float = 0.0):
    """The watchdog in a process of its own; with ``quiet_for``, the process prints "quiet" once a watchdog check
    has seen that much silence and let it pass (or "ABORT ..." if the watchdog fired first)."""
    code = WATCHDOG.format(timeout=timeout, arm=arm, quiet_for=quiet_for)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_watchdog_stops_a_rank_stuck_without_progress():
    proc = _watchdog_process(0.5, arm="dog.arm()")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "no progress for" in out and "peer timeout 0.5 s" in out


def test_watchdog_timeout_can_be_longer_for_the_start_sync():
    """Armed with the start sync's 30 s: a check that saw five step timeouts (0.5 s) of silence let it pass."""
    proc = _watchdog_process(0.1, arm="dog.arm(30)", quiet_for=0.5)
    try:
        assert proc.stdout.readline().strip() == "quiet" and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_watchdog_turns_sigterm_into_a_recorded_stop_while_the_main_thread_is_blocked():
    """Unarmed, silence alone does not fire (a check let five peer timeouts of silence pass); then SIGTERM, while
    the main thread is blocked, stops the process with the signal's exit status."""
    proc = _watchdog_process(0.1, arm="", quiet_for=0.5)
    assert proc.stdout.readline().strip() == "quiet" and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "SIGTERM received" in out


def test_launcher_entry_point_runs_without_the_console_script(monkeypatch):
    """An mlx installed without its scripts (the GPU box's wheel install): the same entry point, via python -c."""
    import app.workloads.launch as launch

    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    monkeypatch.setattr(launch.os, "access", lambda path, mode: False)
    command = launch.launcher_command()
    assert command[:2] == [sys.executable, "-c"]
    out = subprocess.run([*command, "--print-python"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == sys.executable


def test_run_summary_lists_every_generated_token(tiny_llama, tmp_path):
    """The ``outputs`` block the rank/run comparisons rely on: every decoded token, per request, and a digest."""
    from app.workloads.outputs import digest_of

    from .helpers import burst_toml, run_backend, write_scenario

    summary, _, _ = run_backend(tiny_llama, write_scenario(tmp_path, burst_toml(n=3, gen_tokens="[3, 6]")), "slab")
    outputs = summary["outputs"]
    assert outputs["requests"] == 3 and sorted(outputs["generated"]) == ["0", "1", "2"]
    assert outputs["generated_tokens"] == summary["decode_tokens"] == sum(map(len, outputs["generated"].values()))
    assert outputs["digest"] == digest_of(outputs["generated"])
    assert digest_of({"1": [2], "0": [1]}) == digest_of({"0": [1], "1": [2]}) != digest_of({"0": [1], "1": [3]})
