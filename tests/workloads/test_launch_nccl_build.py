"""``record --ranks N --launch-backend nccl`` on an MLX build without CUDA (this machine's mlx-cpu) is refused before
anything launches: one line, exit 2, no --out directory, no launcher started (it used to launch every backend's
ranks, each failing "Cannot initialize nccl distributed backend", exit 1). The build is read from the package
metadata, mlx-free; a CUDA build (simulated here) and a hostfile's remote hosts are not refused."""

from __future__ import annotations

import pytest

import app.workloads.launch as launch
from app.workloads.launch import LaunchError, LaunchPlan, installed_mlx_build


@pytest.fixture
def no_launch(monkeypatch):
    """RankLaunch replaced by one that records being started (and fails, so old code ends quickly)."""
    started = []

    class Recorder:
        def __init__(self, command, **_kwargs):
            started.append(command)
            self.launcher_notes, self.failures, self.killed, self.returncode = {}, {}, None, 1

        def start(self):
            return self

        def wait(self, _timeout):
            return 1

    monkeypatch.setattr(launch, "RankLaunch", Recorder)
    return started


def test_this_machine_has_the_cpu_build():
    kind, build = installed_mlx_build()
    assert kind == "cpu" and build.startswith("mlx-cpu ")


def test_record_refuses_nccl_on_the_cpu_build_before_launch(cli, no_launch, tmp_path):
    out = tmp_path / "rec"
    code, stdout, err = cli(["record", "--ranks", "2", "--launch-backend", "nccl", "--model", "synthetic:tiny-llama",
                             "--out", str(out)])
    assert code == 2 and stdout == "" and no_launch == [] and not out.exists()
    assert err == ["slabscope record: the nccl backend needs MLX's CUDA build (pip install 'mlx[cuda12]'); this one "
                   f"is {installed_mlx_build()[1]}: use --launch-backend ring"]


def test_the_tui_run_form_says_the_same():
    from app.tui.screens.run_form import RunChoice
    from app.tui.sources import check_run_choice
    from app.workloads.spec import PoolChoice

    choice = RunChoice("churn", "synthetic:tiny-llama", ["slab"], PoolChoice(), 1.5, ranks=2, launch_backend="nccl")
    assert "needs MLX's CUDA build" in check_run_choice(choice)


@pytest.mark.parametrize("kind, refused", [("cpu", True), ("metal", True), ("cuda", False), ("unknown", False)])
def test_only_a_build_known_to_lack_cuda_is_refused(monkeypatch, kind, refused):
    monkeypatch.setattr(launch, "installed_mlx_build", lambda: (kind, f"mlx-{kind} 0.0"))
    if refused:
        with pytest.raises(LaunchError, match=f"this one is mlx-{kind} 0.0"):
            LaunchPlan(ranks=2, backend="nccl")
    else:
        assert LaunchPlan(ranks=2, backend="nccl").backend == "nccl"
    assert LaunchPlan(ranks=2, backend="ring").backend == "ring"  # ring runs on any build


def test_a_hostfile_launch_is_not_judged_by_this_hosts_build(tmp_path):
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text('[{"ssh": "gpu-a.invalid", "ips": []}, {"ssh": "gpu-b.invalid", "ips": []}]')
    assert LaunchPlan(ranks=2, backend="nccl", hostfile=str(hostfile)).backend == "nccl"
