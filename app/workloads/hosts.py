"""The hosts of a ``--hostfile`` launch (mlx-free): checked before anything starts, and named when one fails.

``mlx.launch`` reaches every host but ``127.0.0.1`` over ``ssh -tt -o LogLevel=QUIET``: an unreachable host ends
with "Node with rank k exited with code 255" and nothing else (ssh's own words are silenced). So before a launch,
``check_hostfile_hosts`` resolves every remote host's ssh target (``ssh -G``: the HostName an alias in
~/.ssh/config stands for; nothing is contacted) and checks the ``ips`` entries are IP addresses, all in bounded
time, and names every host that fails; after a launch, ``ssh_exit_text`` turns a remote rank's exit 255 into what it
means. A host that resolves but does not answer is only known once ssh tries: the second path names it.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

LOCAL_HOST = "127.0.0.1"  # the one host mlx.launch runs without ssh
RESOLVE_TIMEOUT_S = 10.0  # all hosts together: a resolver that does not answer is a problem, not a hang
SSH_EXIT_FAILED = 255     # ssh's status when it could not connect (or authenticate): the remote command never ran


@dataclass(frozen=True)
class HostEntry:
    rank: int
    ssh: str
    ips: list[str] = field(default_factory=list)

    @property
    def remote(self) -> bool:
        return self.ssh != LOCAL_HOST


def hostfile_hosts(path: str) -> list[HostEntry]:
    """The hostfile's hosts in rank order (mlx's format: a list, or ``{"hosts": [...]}``, of ``{"ssh": name,
    "ips": [...]}``). ValueError (one line) for a file that is not one."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValueError(f"hostfile {path}: {exc}") from None
    hosts = data.get("hosts") if isinstance(data, dict) else data
    if not isinstance(hosts, list) or not hosts:
        raise ValueError(f"hostfile {path}: expected a JSON list of hosts (or {{\"hosts\": [...]}})")
    entries = []
    for rank, host in enumerate(hosts):
        if not isinstance(host, dict) or not isinstance(host.get("ssh"), str) or not host["ssh"]:
            raise ValueError(f"hostfile {path}: host {rank} has no \"ssh\" name")
        ips = host.get("ips", [])
        if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
            raise ValueError(f"hostfile {path}: host {rank} ({host['ssh']}): \"ips\" must be a list of addresses")
        entries.append(HostEntry(rank, host["ssh"], list(ips)))
    return entries


def ssh_target(name: str) -> str:
    """The host ssh connects to for ``name`` (``ssh -G``: an alias's HostName; no connection is made), else
    ``name``."""
    try:
        result = subprocess.run(["ssh", "-G", name], capture_output=True, text=True, timeout=5,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return name
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key.lower() == "hostname" and value.strip():
            return value.strip()
    return name


def _resolve_all(names: list[str], timeout: float) -> dict[str, str | None]:
    """name -> why it does not resolve (None: it does), every lookup in its own daemon thread, waited on together
    for at most ``timeout`` (a lookup still running then is reported as not answering)."""
    answers: dict[str, str | None] = {}

    def lookup(name: str) -> None:
        try:
            socket.getaddrinfo(name, 22, type=socket.SOCK_STREAM)
            answers[name] = None
        except (socket.gaierror, UnicodeError) as exc:
            answers[name] = f"does not resolve ({getattr(exc, 'strerror', None) or exc})"

    threads = [threading.Thread(target=lookup, args=(name,), daemon=True) for name in dict.fromkeys(names)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {name: answers.get(name, f"no answer from the resolver within {timeout:g} s") for name in names}


def host_problems(hosts: list[HostEntry], timeout: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """One phrase per host that cannot be reached as written, in rank order (an ssh target that does not resolve,
    an ``ips`` entry that is no IP address, no ssh to reach a remote host with); empty when none."""
    remote = [host for host in hosts if host.remote]
    if remote and shutil.which("ssh") is None:
        return [f"ssh is not on PATH: mlx.launch cannot reach {', '.join(h.ssh for h in remote)}"]
    targets = {host.ssh: ssh_target(host.ssh) for host in remote}
    why = _resolve_all(list(targets.values()), timeout)
    problems = []
    for host in hosts:
        found = []
        target = targets.get(host.ssh)
        if target is not None and why[target] is not None:
            found.append(why[target] + (f" (its ssh HostName {target})" if target != host.ssh else ""))
        found += [f"{ip!r} is not an IP address" for ip in host.ips if not _is_ip(ip)]
        if found:
            problems.append(f"rank {host.rank} ({host.ssh}): {', '.join(found)}")
    return problems


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_hostfile_hosts(path: str, timeout: float = RESOLVE_TIMEOUT_S) -> None:
    """ValueError (one line naming every host that cannot be reached, and why) before a launch; changes nothing."""
    problems = host_problems(hostfile_hosts(path), timeout)
    if problems:
        raise ValueError(f"hostfile {path}: unreachable host{'s' if len(problems) > 1 else ''}: "
                         + "; ".join(problems))


def ssh_exit_text(host: str | None, code: int) -> str | None:
    """What a rank's exit ``code`` means when mlx.launch ran it on ``host`` over ssh (None: nothing more than the
    code): 255 is ssh's own failure, so the rank never started."""
    if host is None or host == LOCAL_HOST or code != SSH_EXIT_FAILED:
        return None
    return (f"ssh to {host} failed (exit {code}: the host is unreachable, refused the connection or did not accept "
            "the login; mlx.launch runs ssh with its messages silenced: try `ssh " + host + " true`)")
