"""Low-level helpers of the netns test hosts: the ``ip`` command, the namespaces, links and
processes of a set of hosts (``tfcXXXX-*``), and which process owns which set.

A set belongs to the process that created it (``/run/tfcluster-netns/tfcXXXX.json``, which also
records the /24 of 198.18.0.0/15 it claimed); ``_remove_prefix`` removes everything of a set and
``residue`` says what of it is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from tests.support.procs import alive, by_pid, kill_all

SSHD = "/usr/sbin/sshd"
#: All test addresses come from here (RFC 2544 benchmarking space), one /24 per set of hosts.
TEST_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
STATE_DIR = Path("/run/tfcluster-netns")
#: Every name a test cluster gets (:mod:`tests.netns.lifecycle` creates them): ``tfcXXXX-br``,
#: ``tfcXXXX-vI`` (links), ``tfcXXXX-hI`` (namespaces, and the directory of host I's sshd files,
#: so its command line carries the name too).
NAME_RE = re.compile(r"^(tfc[0-9a-f]{4})-(?:br|v\d+|h\d+)$")
_PREFIX_IN_ARGS = re.compile(r"/(tfc[0-9a-f]{4})-h\d+/")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


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
