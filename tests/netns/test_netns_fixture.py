"""The network namespace hosts themselves, without tfcluster's SSH backend: addresses, sshd, reach
between namespaces, link down/up, sessions of a vanished client, teardown and the stale sweep."""

from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import paramiko
import psutil
import pytest

from launcher.spec.loading import load_spec
from tests.netns.cluster import REPO_ROOT, NetnsHost, NetnsHostsFactory
from tests.netns.lifecycle import create_cluster, sweep_stale
from tests.netns.plumbing import (
    TEST_NETWORK,
    NetnsUnavailableError,
    check_available,
    links,
    namespaces,
    residue,
    state_path,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

LISTENER = r"""
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
server.settimeout(30)
print("ready", flush=True)
conn, peer = server.accept()
conn.sendall(f"hello from {sys.argv[1]} to {peer[0]}\n".encode())
conn.close()
"""

CONNECT = r"""
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as s:
    print(s.makefile().readline().strip())
"""


def ssh_client(host: NetnsHost) -> paramiko.SSHClient:
    """A plain paramiko login with the host's identity file, trusting only its known_hosts file."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(host.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host.address, port=host.ssh_port, username=host.user,
                   key_filename=str(host.identity_file), look_for_keys=False, allow_agent=False,
                   timeout=10, banner_timeout=10, auth_timeout=10)
    return client


def wait_for(condition_name: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            pytest.fail(f"{condition_name}: not within {timeout}s")
        time.sleep(0.05)


def names_of(host: NetnsHost) -> list[str]:
    names = []
    for proc in host.processes():
        try:
            names.append(proc.name())
        except psutil.Error:
            continue
    return names


def connect_error(address: str, port: int, timeout: float) -> OSError | None:
    """Why a TCP connection from here to ``address:port`` failed; None if it succeeded."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except OSError as exc:
        return exc
    return None


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_hosts_get_benchmark_addresses_on_a_bridge_and_no_route_beyond_it(
        netns_hosts: NetnsHostsFactory) -> None:
    cluster = netns_hosts(3)
    assert [host.name for host in cluster] == ["h1", "h2", "h3"]
    assert cluster.subnet.subnet_of(TEST_NETWORK)
    base = cluster.subnet.network_address
    assert [host.address for host in cluster] == [str(base + 11), str(base + 12), str(base + 13)]
    assert cluster.gateway == str(base + 1)
    assert f"inet {cluster.gateway}/24" in subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", cluster.bridge], capture_output=True, text=True,
        check=True).stdout
    for host in cluster:
        assert host.namespace in namespaces() and host.veth in links()
        assert host.namespace.startswith(cluster.prefix) and host.veth.startswith(cluster.prefix)
        routes = host.run_in(["ip", "-4", "route", "show"]).stdout
        assert "default" not in routes, routes
        assert f"inet {host.address}/24" in host.run_in(["ip", "-4", "-o", "addr", "show"]).stdout
        assert "inet6" not in host.run_in(["ip", "-o", "addr", "show", "dev", "eth0"]).stdout


def test_every_sshd_answers_from_the_root_namespace(netns_hosts: NetnsHostsFactory) -> None:
    for host in netns_hosts(3):
        assert host.ssh_banner().startswith("SSH-2.0-OpenSSH"), host


def test_login_with_the_identity_file_and_known_hosts_lands_in_the_namespace(
        netns_hosts: NetnsHostsFactory) -> None:
    for host in netns_hosts(3):
        expected = host.run_in(["readlink", "/proc/self/ns/net"]).stdout.strip()
        client = ssh_client(host)
        try:
            _, stdout, _ = client.exec_command("readlink /proc/self/ns/net; ip -4 -o addr show",
                                               timeout=10)
            out = stdout.read().decode()
            assert stdout.channel.recv_exit_status() == 0
            sftp = client.open_sftp()
            try:  # the filesystem is shared: the client's own files are there
                assert sftp.stat(str(host.known_hosts)).st_size == host.known_hosts.stat().st_size
            finally:
                sftp.close()
        finally:
            client.close()
        assert out.splitlines()[0] == expected
        assert f"inet {host.address}/24" in out


def test_namespaces_reach_each_other(netns_hosts: NetnsHostsFactory) -> None:
    h1, h2, _ = netns_hosts(3)
    listener = h2.spawn_in([sys.executable, "-c", LISTENER, h2.address, "5000"])
    assert listener.stdout is not None
    ready, _, _ = select.select([listener.stdout], [], [], 15)
    assert ready and listener.stdout.readline().strip() == "ready"
    reply = h1.run_in([sys.executable, "-c", CONNECT, h2.address, "5000", "5"]).stdout.strip()
    assert reply == f"hello from {h2.address} to {h1.address}"
    assert listener.wait(10) == 0


def test_link_down_cuts_a_host_off_and_link_up_restores_it(netns_hosts: NetnsHostsFactory) -> None:
    h1, h2, h3 = netns_hosts(3)
    assert h3.reachable()
    try:
        h3.link_down()
        assert not h3.is_link_up()
        started = time.monotonic()
        assert connect_error(h3.address, h3.ssh_port, timeout=1.0) is not None
        assert time.monotonic() - started < 3
        from_h1 = h1.run_in([sys.executable, "-c", CONNECT, h3.address, "22", "1"], check=False)
        assert from_h1.returncode != 0
        assert h2.reachable() and h1.reachable()  # the others are not affected
    finally:
        h3.link_up()
    assert h3.is_link_up()
    assert h3.ssh_banner().startswith("SSH-2.0-")


def test_sshd_ends_the_session_of_a_client_that_vanished(netns_hosts: NetnsHostsFactory) -> None:
    host = netns_hosts(3)[1]
    client = ssh_client(host)
    try:
        # cat lives until its stdin closes (keep the channel's files: dropping them closes it).
        session = client.exec_command("exec cat")
        wait_for("cat running in the namespace", lambda: "cat" in names_of(host), 10)
        host.link_down()
        try:
            # ClientAliveInterval 2, ClientAliveCountMax 3: sshd gives up (about 16 s here, OpenSSH
            # 9.2) and closes the session's pipes; cat sees EOF; nothing of the session is left.
            left = host.wait_no_processes(40)
            assert not left, [(p.pid, p.name()) for p in left]
        finally:
            host.link_up()
    finally:
        client.close()
    del session
    assert "Timeout, client not responding" in host.sshd_log


def test_write_spec_names_the_namespaces_as_hosts(netns_hosts: NetnsHostsFactory,
                                                  tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    path = cluster.write_spec(tmp_path / "spec.yaml", name="netns-digits",
                              entrypoint={"module": "worker.examples.digits",
                                          "args": ["--steps", "20"]},
                              checkpoint_dir=tmp_path / "ckpt", env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    spec = load_spec(path)
    assert spec.python == sys.executable
    assert spec.workdir == str(REPO_ROOT)
    assert spec.checkpoint is not None and spec.checkpoint.dir == str(tmp_path / "ckpt")
    assert list(spec.hosts) == ["h1", "h2", "h3"]
    for host in cluster:
        entry = spec.hosts[host.name]
        assert (entry.address, entry.user, entry.port) == (host.address, "root", 22)
        assert entry.identity_file == str(host.identity_file)
        assert entry.known_hosts == str(host.known_hosts)
        assert host.known_hosts_line() in host.known_hosts.read_text()
    assert [(str(s.task), s.host, s.port) for s in spec.task_slots()] == [
        ("chief:0", "h1", 23456), ("worker:0", "h2", 23456), ("worker:1", "h3", 23456)]


def test_reset_kills_leftovers_and_reconnects(netns_hosts: NetnsHostsFactory) -> None:
    cluster = netns_hosts(3)
    cluster[0].spawn_in(["sleep", "600"])
    cluster[2].link_down()
    again = netns_hosts(3)  # a later test asking for the same set gets it reset
    assert again is cluster
    assert [host.processes() for host in cluster] == [[], [], []]
    assert all(host.is_link_up() and host.reachable() for host in cluster)


def test_teardown_removes_every_namespace_link_and_process(netns_hosts: NetnsHostsFactory,
                                                           tmp_path: Path) -> None:
    netns_hosts(3)  # a live set alongside, which must not be touched
    cluster = create_cluster(2, tmp_path)
    stray: subprocess.Popen[bytes] | None = None
    client: paramiko.SSHClient | None = None
    try:
        assert cluster.subnet.subnet_of(TEST_NETWORK)
        created = [cluster.bridge, *(h.veth for h in cluster)]
        spaces = [h.namespace for h in cluster]
        assert set(created) <= set(links()) and set(spaces) <= set(namespaces())
        sshds = [h.sshd.pid for h in cluster if h.sshd is not None]
        assert len(sshds) == 2
        sleeper = cluster[0].spawn_in(["sleep", "600"])
        # Started outside the fixture: found through its namespace alone.
        stray = subprocess.Popen(["ip", "netns", "exec", cluster[1].namespace, "sleep", "600"],
                                 start_new_session=True)
        client = ssh_client(cluster[1])
        client.exec_command("exec sleep 601")
        wait_for("SSH session's sleep", lambda: names_of(cluster[1]).count("sleep") == 2, 10)
        inside = {pid for host in cluster for pid in host.pids()}
        assert {sleeper.pid, stray.pid, *sshds} <= inside
    finally:
        cluster.teardown()
        if client is not None:
            client.close()
        if stray is not None:
            stray.wait(10)
    assert not set(spaces) & set(namespaces())
    assert not [name for name in links() if name.startswith(cluster.prefix)]
    assert not [pid for pid in inside if alive(pid)]
    assert residue(cluster.prefix) == []
    assert not state_path(cluster.prefix).exists()
    cluster.teardown()  # idempotent


def test_sweep_removes_sets_of_dead_runs_and_spares_live_ones(netns_hosts: NetnsHostsFactory,
                                                              tmp_path: Path) -> None:
    live = netns_hosts(3)
    stale = create_cluster(1, tmp_path)
    try:
        assert stale.subnet != live.subnet and stale.subnet.subnet_of(TEST_NETWORK)
        assert ipaddress.ip_address(stale[0].address) in stale.subnet
        sleeper = stale[0].spawn_in(["sleep", "600"])
        # Its owner "died": the recorded pid now belongs to a process started at another time.
        state = json.loads(state_path(stale.prefix).read_text())
        state_path(stale.prefix).write_text(json.dumps({**state, "owner_start": 1.0}))
        removed = sweep_stale()
        assert stale.prefix in removed and live.prefix not in removed
        assert residue(stale.prefix) == []
        assert not alive(sleeper.pid)
        assert all(host.namespace in namespaces() for host in live)
        assert state_path(live.prefix).exists()
        for host in live:
            assert host.ssh_banner().startswith("SSH-2.0-")
    finally:
        stale.teardown()


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsUnavailableError, match=r"need root .* running as uid 1000"):
        check_available()
