"""A ``--hostfile`` launch names the hosts it cannot reach (app/workloads/hosts.py). mlx.launch silences ssh, so an
unreachable host used to end as "exited with code 255" and nothing else. Before the launch, every remote host's ssh
target must resolve and every ``ips`` entry be an IP address (one line, exit 2, nothing started); after it, a remote
rank's exit 255 says ssh failed and to which host. Only unresolvable names (``.invalid``) and invalid IPs here:
nothing is contacted."""

from __future__ import annotations

import json
import sys
import threading

import pytest

import app.workloads.hosts as hosts
import app.workloads.launch as launch
from app.workloads.hosts import HostEntry, host_problems, hostfile_hosts, ssh_exit_text


def _hostfile(tmp_path, entries) -> str:
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_record_names_every_unreachable_host_before_launch(cli, monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(launch, "RankLaunch", lambda *a, **k: started.append(a))
    path = _hostfile(tmp_path, [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]},
                                {"ssh": "x.invalid", "ips": ["999.1.1.1", "10.0.0.2"]}])
    out = tmp_path / "rec"
    code, stdout, err = cli(["record", "--ranks", "2", "--hostfile", path, "--model", "synthetic:tiny-llama",
                             "--out", str(out)])
    assert code == 2 and stdout == "" and started == [] and not out.exists()
    assert len(err) == 1 and err[0].startswith(f"slabscope record: hostfile {path}: unreachable host: rank 1 "
                                               "(x.invalid): does not resolve")
    assert err[0].endswith(", '999.1.1.1' is not an IP address") and "rank 0" not in err[0]


def test_every_unreachable_host_is_named(tmp_path):
    path = _hostfile(tmp_path, [{"ssh": "x.invalid"}, {"ssh": "127.0.0.1"}, {"ssh": "y.invalid"}])
    with pytest.raises(ValueError, match=r"unreachable hosts: rank 0 \(x\.invalid\): does not resolve .*; "
                                         r"rank 2 \(y\.invalid\): does not resolve"):
        hosts.check_hostfile_hosts(path)


def test_an_invalid_ip_as_the_ssh_name_does_not_resolve(tmp_path):
    (problem,) = host_problems(hostfile_hosts(_hostfile(tmp_path, [{"ssh": "999.1.1.1"}])))
    assert problem.startswith("rank 0 (999.1.1.1): does not resolve")


def test_local_and_resolvable_hosts_pass():
    assert host_problems([HostEntry(0, "127.0.0.1", ["127.0.0.1"]), HostEntry(1, "localhost", ["::1"])]) == []


def test_a_resolver_that_does_not_answer_is_named_within_the_timeout(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(hosts.socket, "getaddrinfo", lambda *a, **k: release.wait(30))
    try:
        (problem,) = host_problems([HostEntry(0, "slow.invalid")], timeout=0.2)
    finally:
        release.set()
    assert problem == "rank 0 (slow.invalid): no answer from the resolver within 0.2 s"


@pytest.mark.parametrize("entries, fragment", [({"hosts": []}, "expected a JSON list"),
                                               ([{"ips": []}], "host 0 has no \"ssh\" name"),
                                               ([{"ssh": "a", "ips": "10.0.0.1"}], "must be a list")])
def test_a_malformed_hostfile_is_one_line(tmp_path, entries, fragment):
    with pytest.raises(ValueError, match=fragment):
        hostfile_hosts(_hostfile(tmp_path, entries))


def test_a_remote_ranks_exit_255_after_launch_names_the_host():
    """What mlx.launch prints when ssh fails (a host that resolves but does not answer), fed through RankLaunch."""
    said = ("[WARN] Node with rank 1 exited with code 255", "[WARN] Node with rank 0 exited with code 255",
            "[WARN] Node with rank 2 exited with code 1")
    command = [sys.executable, "-c", f"print({chr(10).join(said)!r})"]
    import io

    run = launch.RankLaunch(command, stream=io.StringIO(), hosts={0: "127.0.0.1", 1: "node-b.invalid", 2: "c.invalid"})
    assert run.start().wait(60) == 0
    assert run.launcher_notes[1] == "exited with code 255: " + ssh_exit_text("node-b.invalid", 255)
    assert "ssh to node-b.invalid failed" in run.launcher_notes[1]
    assert run.launcher_notes[0] == "exited with code 255"  # rank 0 ran here, without ssh
    assert run.launcher_notes[2] == "exited with code 1"    # the rank ran and failed: its own error says why
