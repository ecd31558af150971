"""Building and sweeping sets of netns test hosts: ``create_cluster`` / ``netns_cluster``,
``sweep_stale`` and ``main()`` (``python -m tests.netns.lifecycle``).

``create_cluster(n, directory)`` builds, in this order:

- a Linux bridge ``tfcXXXX-br`` in the root namespace with address ``198.18.K.1/24`` (K is 0 unless
  that subnet is in use, e.g. by a concurrent run): the coordinator, running in the root namespace,
  reaches every host through it;
- per host ``hI`` (I = 1..n) a network namespace ``tfcXXXX-hI`` joined to the bridge by a veth pair
  (``tfcXXXX-vI`` in the root namespace, ``eth0`` inside), ``lo`` up and ``eth0`` at
  ``198.18.K.(10+I)/24``, no default route (nothing in a namespace can reach beyond the bridge) and
  no IPv6 on the new links;
- per host an ``sshd -D -e`` started with ``ip netns exec``, listening on that address port 22 only,
  with its own temporary ed25519 host key; one temporary client key (``identity_file``) that every
  sshd accepts, and one ``known_hosts`` file that trusts every host's key under its address.

Namespaces share the filesystem with the root namespace, so the repository, its venv and temporary
files are visible on every "host". All traffic stays on loopback and the bridge: the addresses are in
198.18.0.0/15 (benchmarking addresses, never routed), and the host's routes, firewall and existing
interfaces are never touched.

A set belongs to the process that created it (``/run/tfcluster-netns/tfcXXXX.json``); ``sweep_stale()``
removes sets whose owner is gone (a killed test run), never a live one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.netns.cluster import _LIVE, NetnsCluster, NetnsHost
from tests.netns.plumbing import (
    SSHD,
    START_TIMEOUT_S,
    NetnsUnavailableError,
    _claim,
    _disable_ipv6,
    _ip,
    _keygen,
    _our_prefixes,
    _owner_alive,
    _read_state,
    _remove_prefix,
    _state_lock,
    check_available,
    require_sshd,
)

MAX_HOSTS = 50

SSHD_CONFIG = """\
# sshd of netns test host {name} ({namespace}); started with ip netns exec.
ListenAddress {address}:{port}
AddressFamily inet
HostKey {host_key}
PidFile {directory}/sshd.pid
AuthorizedKeysFile {authorized_keys}
StrictModes no
PermitRootLogin yes
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 100
MaxSessions 50
# A session whose client vanished (link down, coordinator killed) is ended: with the defaults
# (2, 3) about 16 s after the client's last packet (measured, OpenSSH 9.2).
ClientAliveInterval {client_alive_interval}
ClientAliveCountMax {client_alive_count_max}
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""


def sweep_stale() -> list[str]:
    """Remove every set whose owner process is gone (a test run that was killed), with all its
    processes; sets of live processes are left alone. Returns the prefixes removed."""
    removed = []
    with _state_lock():
        for prefix in sorted(_our_prefixes()):
            if _owner_alive(_read_state(prefix)):
                continue
            problems = _remove_prefix(prefix)
            if problems:
                raise RuntimeError(f"cannot remove stale netns set {prefix}: " + "; ".join(problems))
            removed.append(prefix)
    return removed


def create_cluster(n: int, directory: Path, *, client_alive_interval: int = 2,
                   client_alive_count_max: int = 3) -> NetnsCluster:
    """``n`` hosts h1..hn, each a namespace with a running, reachable sshd (see the module doc).
    Files go in ``directory/tfcXXXX``. On any failure everything created is removed again.
    ``client_alive_*`` are the sshds' ClientAliveInterval / ClientAliveCountMax."""
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"n must be between 1 and {MAX_HOSTS} (got {n})")
    require_sshd()
    with _state_lock():
        prefix, subnet = _claim(n)
    cluster = NetnsCluster(prefix, subnet, directory / prefix)
    _LIVE[prefix] = cluster
    try:
        _build(cluster, n, client_alive_interval, client_alive_count_max)
    except BaseException as exc:
        try:
            cluster.teardown()
        except RuntimeError as cleanup:
            if sys.version_info >= (3, 11):
                exc.add_note(str(cleanup))
        raise
    return cluster


def _build(cluster: NetnsCluster, n: int, client_alive_interval: int,
           client_alive_count_max: int) -> None:
    cluster.directory.mkdir(parents=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    _keygen(cluster.identity_file, f"tfcluster-netns-client-{cluster.prefix}")
    authorized_keys = cluster.directory / "authorized_keys"
    authorized_keys.write_text(cluster.identity_file.with_suffix(".pub").read_text())

    prefix_len = str(cluster.subnet.prefixlen)
    _ip("link", "add", cluster.bridge, "type", "bridge", "forward_delay", "0")
    _disable_ipv6(cluster.bridge)
    _ip("addr", "add", f"{cluster.gateway}/{prefix_len}", "dev", cluster.bridge)
    _ip("link", "set", cluster.bridge, "up")

    for i in range(1, n + 1):
        name = f"h{i}"
        namespace, veth = f"{cluster.prefix}-{name}", f"{cluster.prefix}-v{i}"
        address = str(cluster.subnet.network_address + 10 + i)
        host_dir = cluster.directory / namespace
        host_dir.mkdir()
        host = NetnsHost(name=name, namespace=namespace, address=address, veth=veth,
                         directory=host_dir, user=cluster.user,
                         identity_file=cluster.identity_file, known_hosts=cluster.known_hosts,
                         host_key=host_dir / "ssh_host_ed25519_key")
        cluster.hosts.append(host)
        _ip("netns", "add", namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _disable_ipv6(veth)
        _disable_ipv6("eth0", namespace)
        _ip("link", "set", veth, "master", cluster.bridge)
        _ip("link", "set", veth, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{prefix_len}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")

    for host in cluster.hosts:
        _keygen(host.host_key, f"tfcluster-netns-{host.name}")
        config = host.directory / "sshd_config"
        config.write_text(SSHD_CONFIG.format(
            name=host.name, namespace=host.namespace, address=host.address, port=host.ssh_port,
            host_key=host.host_key, directory=host.directory, authorized_keys=authorized_keys,
            client_alive_interval=client_alive_interval,
            client_alive_count_max=client_alive_count_max))
        with (host.directory / "sshd.log").open("wb") as log:
            host.sshd = subprocess.Popen(host.netns_argv([SSHD, "-D", "-e", "-f", str(config)]),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
    cluster.known_hosts.write_text("".join(host.known_hosts_line() for host in cluster.hosts))
    for host in cluster.hosts:
        host.wait_reachable(START_TIMEOUT_S)


@contextlib.contextmanager
def netns_cluster(n: int, directory: Path, **options: int) -> Iterator[NetnsCluster]:
    """``create_cluster`` as a context manager: torn down (and checked) on the way out."""
    cluster = create_cluster(n, directory, **options)
    try:
        yield cluster
    finally:
        cluster.teardown()


def main() -> int:
    """``python -m tests.netns.lifecycle``: remove the sets of killed test runs, say what is left."""
    try:
        check_available()
    except NetnsUnavailableError as exc:
        print(f"netns: {exc}", file=sys.stderr)
        return 1
    for prefix in sweep_stale():
        print(f"removed stale set {prefix}")
    for prefix in sorted(_our_prefixes()):
        state = _read_state(prefix) or {}
        print(f"in use: {prefix} ({state.get('subnet', '?')}, owner pid {state.get('owner_pid', '?')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
