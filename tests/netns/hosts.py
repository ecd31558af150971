"""Linux network namespaces as the hosts of a simulated multi-host cluster, each with its own sshd.

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

Everything is removed by ``NetnsCluster.teardown()`` (idempotent; it kills every process in each
namespace, deletes the veths, namespaces and bridge, then checks that nothing is left). A set
belongs to the process that created it (``/run/tfcluster-netns/tfcXXXX.json``); ``sweep_stale()``
removes sets whose owner is gone (a killed test run), never a live one.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import getpass
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import psutil
import yaml

from tests.support.procs import alive, by_pid, kill_all, wait_until_empty

SSHD = "/usr/sbin/sshd"
SSH_PORT = 22
REPO_ROOT = Path(__file__).resolve().parents[2]
#: All test addresses come from here (RFC 2544 benchmarking space), one /24 per set of hosts.
TEST_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
STATE_DIR = Path("/run/tfcluster-netns")
#: Every name this module creates: ``tfcXXXX-br``, ``tfcXXXX-vI`` (links), ``tfcXXXX-hI`` (namespaces,
#: and the directory of host I's sshd files, so its command line carries the name too).
NAME_RE = re.compile(r"^(tfc[0-9a-f]{4})-(?:br|v\d+|h\d+)$")
_PREFIX_IN_ARGS = re.compile(r"/(tfc[0-9a-f]{4})-h\d+/")
MAX_HOSTS = 50
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
DEFAULT_TASK_PORT = 23456

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


class NetnsUnavailableError(RuntimeError):
    """This machine cannot create network namespaces; ``str()`` says precisely why."""


class SshdMissingError(RuntimeError):
    """openssh-server is not installed."""


# --- small helpers -------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    ip = shutil.which("ip") or "/usr/sbin/ip"
    done = subprocess.run([ip, *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return done


def namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``)."""
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def links() -> list[str]:
    """Names of every link in the root namespace (``veth@peer`` given as ``veth``)."""
    names = []
    for line in _ip("-o", "link", "show").stdout.splitlines():
        match = re.match(r"\d+:\s+([^:@\s]+)", line)
        if match:
            names.append(match.group(1))
    return names


def netns_pids(namespace: str) -> list[int]:
    """Pids of the live processes in ``namespace`` (none if it does not exist)."""
    done = _ip("netns", "pids", namespace, check=False)
    if done.returncode != 0:
        return []
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def _disable_ipv6(interface: str, namespace: str | None = None) -> None:
    """No IPv6 on a new link, so it sends nothing (router solicitations, DAD) when brought up."""
    if not Path("/proc/sys/net/ipv6").is_dir():
        return
    path = f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"
    if namespace is None:
        Path(path).write_text("1\n")
    else:
        _ip("netns", "exec", namespace, "sh", "-c", 'echo 1 > "$1"', "sh", path)


def kill_netns_processes(namespace: str, *, keep: Sequence[int] = (),
                         timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGKILL every process in ``namespace`` except ``keep``, until none is left (new ones may be
    forking meanwhile); returns the pids still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for pid in netns_pids(namespace) if pid not in keep and pid != os.getpid()]
        if not pids or time.monotonic() >= deadline:
            return pids
        kill_all(by_pid(pids), timeout=min(1.0, max(0.05, deadline - time.monotonic())))


def _processes_of_prefix(prefix: str) -> list[psutil.Process]:
    """Processes whose command line names a host directory of set ``prefix`` (its sshds), wherever
    they run: the last resort when a namespace was deleted before its processes died."""
    def named(args: Sequence[str] | None) -> bool:
        return any(match.group(1) == prefix for match in _PREFIX_IN_ARGS.finditer(" ".join(args or ())))

    return alive(proc for proc in psutil.process_iter(["cmdline"])
                 if proc.pid != os.getpid() and named(proc.info["cmdline"]))


def require_sshd() -> None:
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        raise SshdMissingError(
            f"{SSHD} / ssh-keygen not found: install openssh-server (make sshd, or "
            "apt-get update -qq && apt-get install -y -qq openssh-server)")


def _keygen(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


# --- ownership of sets (which run created what), subnet allocation ------------------------------


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    """Serializes claiming, probing and sweeping across processes (pytest-xdist workers, two runs)."""
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    with (STATE_DIR / "lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def state_path(prefix: str) -> Path:
    return STATE_DIR / f"{prefix}.json"


def _this_process() -> dict[str, Any]:
    return {"owner_pid": os.getpid(), "owner_start": psutil.Process().create_time()}


def _read_state(prefix: str) -> dict[str, Any] | None:
    try:
        data = json.loads(state_path(prefix).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _owner_alive(state: Mapping[str, Any] | None) -> bool:
    if state is None:
        return False
    try:
        proc = psutil.Process(int(state["owner_pid"]))
        return abs(proc.create_time() - float(state["owner_start"])) < 1e-3 and \
            proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _our_prefixes() -> set[str]:
    """Prefixes having a namespace, a link or a state file right now."""
    found = {match.group(1) for name in (*namespaces(), *links()) if (match := NAME_RE.match(name))}
    if STATE_DIR.is_dir():
        found |= {p.stem for p in STATE_DIR.glob("tfc*.json") if re.fullmatch(r"tfc[0-9a-f]{4}", p.stem)}
    return found


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has a route or an address in (default routes aside), plus
    the subnets claimed by live sets."""
    route_types = {"unicast", "local", "broadcast", "multicast", "throw", "unreachable",
                   "prohibit", "blackhole", "nat", "anycast"}
    nets = []
    for line in _ip("-4", "-o", "route", "show", "table", "all").stdout.splitlines():
        words = line.split()
        if not words:
            continue
        dest = words[1] if words[0] in route_types and len(words) > 1 else words[0]
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dest, strict=False))
    for match in re.finditer(r"\binet (\S+)", _ip("-4", "-o", "addr", "show").stdout):
        nets.append(ipaddress.IPv4Interface(match.group(1)).network)
    for prefix in _our_prefixes():
        state = _read_state(prefix)
        if state and _owner_alive(state) and "subnet" in state:
            nets.append(ipaddress.IPv4Network(state["subnet"]))
    return nets


def _claim(n: int) -> tuple[str, ipaddress.IPv4Network]:
    """A fresh prefix and a free /24 of 198.18.0.0/15, recorded as this process's (under the lock)."""
    used_prefixes = _our_prefixes()
    prefix = next(p for p in (f"tfc{secrets.token_hex(2)}" for _ in range(1000))
                  if p not in used_prefixes)
    in_use = _networks_in_use()
    for subnet in TEST_NETWORK.subnets(new_prefix=24):
        if not any(subnet.overlaps(net) for net in in_use if net.prefixlen > 0):
            break
    else:
        raise RuntimeError("no free /24 left in 198.18.0.0/15 for netns test hosts")
    state = {**_this_process(), "subnet": str(subnet), "hosts": n}
    state_path(prefix).write_text(json.dumps(state))
    return prefix, subnet


def check_available() -> None:
    """Raise ``NetnsUnavailableError`` saying why, unless this process can create network
    namespaces, veth pairs and bridges (tried for real, and undone at once)."""
    if not sys.platform.startswith("linux"):
        raise NetnsUnavailableError(f"network namespaces need Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        raise NetnsUnavailableError(
            f"network namespace tests need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); running as uid "
            f"{os.geteuid()}")
    if shutil.which("ip") is None and not os.access("/usr/sbin/ip", os.X_OK):
        raise NetnsUnavailableError("the ip command (iproute2) is not installed")
    with _state_lock():
        prefix = next(p for p in (f"tfc{secrets.token_hex(2)}" for _ in range(1000))
                      if p not in _our_prefixes())
        namespace, veth, bridge = f"{prefix}-h0", f"{prefix}-v0", f"{prefix}-br"
        try:
            for step, args in (
                ("ip netns add", ("netns", "add", namespace)),
                ("creating a veth pair", ("link", "add", veth, "type", "veth", "peer", "name",
                                          "eth0", "netns", namespace)),
                ("creating a bridge", ("link", "add", bridge, "type", "bridge")),
            ):
                done = _ip(*args, check=False)
                if done.returncode != 0:
                    raise NetnsUnavailableError(
                        f"{step} is not permitted here (`ip {' '.join(args)}` exited "
                        f"{done.returncode}: {done.stderr.strip()})")
        finally:
            _ip("link", "del", bridge, check=False)
            _ip("link", "del", veth, check=False)
            _ip("netns", "del", namespace, check=False)


# --- hosts and clusters --------------------------------------------------------------------------


@dataclass
class NetnsHost:
    """One simulated host: a network namespace with its own sshd, reached from the root namespace
    at ``address``:``ssh_port``."""

    name: str  # the host's name in a spec: h1, h2, ...
    namespace: str  # tfcXXXX-h1
    address: str  # 198.18.K.11
    veth: str  # the root-namespace end of its veth pair, on the bridge: tfcXXXX-v1
    directory: Path  # its sshd's files: sshd_config, host key, sshd.log
    user: str
    identity_file: Path
    known_hosts: Path
    host_key: Path
    ssh_port: int = SSH_PORT
    sshd: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _spawned: list[subprocess.Popen[str]] = field(default_factory=list, repr=False)

    # network ---

    def link_down(self) -> None:
        """Cut the host off: its veth end in the root namespace goes down, so nothing reaches it
        (not the coordinator, not the other hosts) and its open connections stall."""
        _ip("link", "set", self.veth, "down")

    def link_up(self, *, wait: bool = True, timeout: float = START_TIMEOUT_S) -> None:
        """Reconnect the host; with ``wait``, return once its sshd is reachable again."""
        _ip("link", "set", self.veth, "up")
        if wait:
            self.wait_reachable(timeout)

    def is_link_up(self) -> bool:
        """Whether its veth end in the root namespace is administratively up."""
        flags = re.search(r"<([^>]*)>", _ip("-o", "link", "show", self.veth).stdout)
        return flags is not None and "UP" in flags.group(1).split(",")

    def reachable(self, timeout: float = 1.0) -> bool:
        """Whether a TCP connection from the root namespace to its sshd succeeds within
        ``timeout``."""
        try:
            with socket.create_connection((self.address, self.ssh_port), timeout=timeout):
                return True
        except OSError:
            return False

    def ssh_banner(self, timeout: float = 5.0) -> str:
        """The SSH identification line its sshd sends (``SSH-2.0-OpenSSH_...``)."""
        with socket.create_connection((self.address, self.ssh_port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            data = b""
            while b"\n" not in data and len(data) < 1024:
                chunk = sock.recv(256)
                if not chunk:
                    break
                data += chunk
        return data.split(b"\n", 1)[0].decode("ascii", "replace").rstrip("\r")

    def wait_reachable(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.sshd is not None and self.sshd.poll() is not None:
                raise RuntimeError(f"sshd of {self.name} ({self.namespace}) exited "
                                   f"{self.sshd.returncode}:\n{self.sshd_log}")
            with contextlib.suppress(OSError):
                if self.ssh_banner(timeout=0.5).startswith("SSH-"):
                    return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"sshd of {self.name} not reachable at {self.address}:"
                                   f"{self.ssh_port} within {timeout}s:\n{self.sshd_log}")
            if self.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.sshd.wait(0.05)  # wakes at once if sshd dies
            else:
                time.sleep(0.05)

    # processes ---

    def netns_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run inside this host's namespace."""
        return [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", self.namespace, *argv]

    def run_in(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
               input: str | None = None, env: Mapping[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion inside the namespace (``ip netns exec``), output captured as
        text; ``check`` raises ``CalledProcessError`` on a non-zero exit."""
        return subprocess.run(self.netns_argv(argv), capture_output=True, text=True, input=input,
                              timeout=timeout, check=check,
                              env=None if env is None else dict(env))

    def spawn_in(self, argv: Sequence[str], *, stdout: int | IO[Any] | None = subprocess.PIPE,
                 stderr: int | IO[Any] | None = None, stdin: int | IO[Any] | None = subprocess.DEVNULL,
                 env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``argv`` in the background inside the namespace (text mode, stdout piped); it is
        killed and reaped at teardown at the latest."""
        proc = subprocess.Popen(self.netns_argv(argv), stdin=stdin, stdout=stdout, stderr=stderr,
                                text=True, env=None if env is None else dict(env),
                                start_new_session=True)
        self._spawned.append(proc)
        return proc

    def pids(self) -> list[int]:
        """Every live process in the namespace, the sshd listener included."""
        return netns_pids(self.namespace)

    def processes(self) -> list[psutil.Process]:
        """Every live process in the namespace except the sshd listener: SSH sessions, agents,
        tasks, anything started with ``spawn_in``. Empty when nothing of a job is left."""
        keep = {self.sshd.pid} if self.sshd is not None else set()
        return alive(by_pid(pid for pid in self.pids() if pid not in keep))

    def wait_no_processes(self, timeout: float) -> list[psutil.Process]:
        """Wait up to ``timeout`` for ``processes()`` to be empty; returns those still alive."""
        return wait_until_empty(self.processes, timeout)

    def kill_processes(self) -> list[int]:
        """Kill everything in the namespace but the sshd listener; returns pids that survived."""
        keep = [self.sshd.pid] if self.sshd is not None else []
        left = kill_netns_processes(self.namespace, keep=keep)
        self._reap_spawned()
        return left

    def _reap_spawned(self) -> None:
        for proc in self._spawned:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_TIMEOUT_S)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self._spawned = [proc for proc in self._spawned if proc.returncode is None]

    # ssh ---

    @property
    def known_hosts_name(self) -> str:
        return self.address if self.ssh_port == SSH_PORT else f"[{self.address}]:{self.ssh_port}"

    def known_hosts_line(self) -> str:
        key_type, b64 = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"{self.known_hosts_name} {key_type} {b64}\n"

    @property
    def host_key_blob(self) -> bytes:
        return base64.b64decode(self.host_key.with_suffix(".pub").read_text().split()[1])

    @property
    def sshd_log(self) -> str:
        path = self.directory / "sshd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def spec_entry(self) -> dict[str, Any]:
        """This host's entry under ``hosts`` in a tfcluster spec."""
        return {"address": self.address, "user": self.user, "port": self.ssh_port,
                "identity_file": str(self.identity_file), "known_hosts": str(self.known_hosts)}


class NetnsCluster:
    """A set of ``NetnsHost`` on one bridge. Iterate it, ``len()`` it, index it by position
    (``cluster[0]`` is h1) or by name (``cluster["h2"]``)."""

    def __init__(self, prefix: str, subnet: ipaddress.IPv4Network, directory: Path) -> None:
        self.prefix = prefix
        self.subnet = subnet
        self.directory = directory
        self.bridge = f"{prefix}-br"
        #: The root namespace's address on the bridge: where the coordinator's connections come from.
        self.gateway = str(subnet.network_address + 1)
        self.user = getpass.getuser()
        self.identity_file = directory / "id_ed25519"
        self.known_hosts = directory / "known_hosts"
        self.hosts: list[NetnsHost] = []
        self._torn_down = False

    def __iter__(self) -> Iterator[NetnsHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __getitem__(self, key: int | str) -> NetnsHost:
        if isinstance(key, str):
            for host in self.hosts:
                if key in (host.name, host.namespace, host.address):
                    return host
            raise KeyError(key)
        return self.hosts[key]

    def __repr__(self) -> str:
        return f"NetnsCluster({self.prefix}, {self.subnet}, {[h.name for h in self.hosts]})"

    # specs ---

    def spec_hosts(self) -> dict[str, dict[str, Any]]:
        return {host.name: host.spec_entry() for host in self.hosts}

    def spec_dict(self, *, entrypoint: Mapping[str, Any], name: str = "netns",
                  tasks: Sequence[Mapping[str, Any]] | None = None,
                  task_port: int = DEFAULT_TASK_PORT,
                  checkpoint_dir: str | os.PathLike[str] | None = None,
                  python: str = sys.executable, workdir: str | os.PathLike[str] = REPO_ROOT,
                  **fields: Any) -> dict[str, Any]:
        """A tfcluster spec (as a dict) whose hosts are these namespaces.

        Default tasks: the chief on h1, one worker on each other host, every task on
        ``task_port`` (each namespace has its own ports). ``python`` defaults to this interpreter
        (the venv's) and ``workdir`` to the repository: both are visible in every namespace.
        Further top-level fields (``env``, ``restart``, ``health``, ...) go in as given.
        """
        if tasks is None:
            tasks = [{"type": "chief" if i == 0 else "worker", "host": host.name, "port": task_port}
                     for i, host in enumerate(self.hosts)]
        spec: dict[str, Any] = {
            "name": name,
            "entrypoint": dict(entrypoint),
            "python": python,
            "workdir": os.fspath(workdir),
        }
        if checkpoint_dir is not None:
            spec["checkpoint"] = {"dir": os.fspath(checkpoint_dir)}
        spec["hosts"] = self.spec_hosts()
        spec["tasks"] = [dict(task) for task in tasks]
        spec.update(fields)
        return spec

    def write_spec(self, path: str | os.PathLike[str], *, validate: bool = True,
                   **kwargs: Any) -> Path:
        """Write ``spec_dict(**kwargs)`` as YAML to ``path``; with ``validate``, load it with
        ``launcher.spec.model.load_spec`` so a mistake fails here. Returns the path."""
        target = Path(path)
        target.write_text(yaml.safe_dump(self.spec_dict(**kwargs), sort_keys=False))
        if validate:
            from launcher.spec.loading import load_spec

            load_spec(target)
        return target

    # state between tests ---

    def reset(self) -> None:
        """Back to the state just after creation: every link up and reachable, no process in any
        namespace but its sshd listener."""
        self._check_usable()
        for host in self.hosts:
            if not host.is_link_up():
                host.link_up(wait=False)
        for host in self.hosts:
            host.wait_reachable()
        # After the reachability probes: they leave short-lived pre-auth sshd children behind.
        for host in self.hosts:
            left = host.kill_processes()
            if left:
                raise RuntimeError(f"processes in {host.namespace} survived SIGKILL: {left}")

    def _check_usable(self) -> None:
        if self._torn_down:
            raise RuntimeError(f"{self!r} was torn down")

    # teardown ---

    def teardown(self) -> None:
        """Remove everything of this set, also after a partial creation; safe to call again.
        Raises ``RuntimeError`` naming anything that could not be removed."""
        self._torn_down = True
        _LIVE.pop(self.prefix, None)
        problems = []
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    host.sshd.send_signal(signal.SIGKILL)
            if host.sshd is not None:
                try:
                    host.sshd.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    problems.append(f"sshd of {host.name} (pid {host.sshd.pid}) did not die")
        for host in self.hosts:
            host._reap_spawned()
        problems += _remove_prefix(self.prefix, [h.namespace for h in self.hosts])
        problems += residue(self.prefix)
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                problems.append(f"sshd of {host.name} (pid {host.sshd.pid}) still running")
            problems += [f"process {p.pid} started in {host.namespace} still running"
                         for p in host._spawned if p.poll() is None]
        if problems:
            raise RuntimeError(f"teardown of {self.prefix} left: " + "; ".join(problems))


#: Sets alive in this process, torn down at exit if a test run ends without reaching their
#: finalizers (the session-start sweep of the next run catches a run that was SIGKILLed).
_LIVE: dict[str, NetnsCluster] = {}


def _teardown_live_at_exit() -> None:
    for cluster in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            cluster.teardown()


atexit.register(_teardown_live_at_exit)


def _remove_prefix(prefix: str, known_namespaces: Sequence[str] = ()) -> list[str]:
    """Kill every process of set ``prefix`` and delete its links, namespaces and state file.
    Returns problems (empty when all went)."""
    problems = []
    ours = sorted({*known_namespaces, *(ns for ns in namespaces()
                                          if (m := NAME_RE.match(ns)) and m.group(1) == prefix)})
    for namespace in ours:
        left = kill_netns_processes(namespace)
        if left:
            problems.append(f"processes {left} in {namespace} survived SIGKILL")
    kill_all(_processes_of_prefix(prefix), timeout=STOP_TIMEOUT_S)
    # Root-side veth ends first (deleting one end deletes the pair at once, whereas a deleted
    # namespace frees its links asynchronously), then the namespaces, then the bridge.
    for link in sorted(links(), key=lambda name: name.endswith("-br")):
        match = NAME_RE.match(link)
        if match and match.group(1) == prefix:
            done = _ip("link", "del", link, check=False)
            if done.returncode != 0 and link in links():
                problems.append(f"cannot delete link {link}: {done.stderr.strip()}")
    for namespace in ours:
        if namespace in namespaces():
            done = _ip("netns", "del", namespace, check=False)
            if done.returncode != 0:
                problems.append(f"cannot delete namespace {namespace}: {done.stderr.strip()}")
    with contextlib.suppress(FileNotFoundError):
        state_path(prefix).unlink()
    return problems


def residue(prefix: str) -> list[str]:
    """What of set ``prefix`` still exists: namespaces, links, its processes, its state file."""
    left = [f"namespace {ns}" for ns in namespaces()
            if (m := NAME_RE.match(ns)) and m.group(1) == prefix]
    left += [f"link {link}" for link in links() if (m := NAME_RE.match(link)) and m.group(1) == prefix]
    left += [f"process {p.pid} ({' '.join(p.cmdline()[:3])})" for p in _processes_of_prefix(prefix)]
    if state_path(prefix).exists():
        left.append(f"state file {state_path(prefix)}")
    return left


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


class NetnsHostsFactory(Protocol):
    """The ``netns_hosts`` fixture: ``netns_hosts(n)`` gives a set of ``n`` hosts."""

    def __call__(self, n: int = 3, *, fresh: bool = False) -> NetnsCluster: ...


@contextlib.contextmanager
def netns_cluster(n: int, directory: Path, **options: int) -> Iterator[NetnsCluster]:
    """``create_cluster`` as a context manager: torn down (and checked) on the way out."""
    cluster = create_cluster(n, directory, **options)
    try:
        yield cluster
    finally:
        cluster.teardown()


def main() -> int:
    """``python -m tests.netns.hosts``: remove the sets of killed test runs, say what is left."""
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
