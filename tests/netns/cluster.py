"""The hosts of a simulated multi-host cluster: ``NetnsHost`` (a Linux network namespace with its
own sshd) and ``NetnsCluster`` (a set of them on one bridge), as built by
``tests.netns.lifecycle.create_cluster``.

Everything is removed by ``NetnsCluster.teardown()`` (idempotent; it kills every process in each
namespace, deletes the veths, namespaces and bridge, then checks that nothing is left). Sets still
alive when this process exits are torn down then.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import getpass
import ipaddress
import os
import re
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

from tests.netns.plumbing import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    _ip,
    _remove_prefix,
    kill_netns_processes,
    netns_pids,
    residue,
)
from tests.support.procs import alive, by_pid, wait_until_empty

SSH_PORT = 22
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TASK_PORT = 23456


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


class NetnsHostsFactory(Protocol):
    """The ``netns_hosts`` fixture: ``netns_hosts(n)`` gives a set of ``n`` hosts."""

    def __call__(self, n: int = 3, *, fresh: bool = False) -> NetnsCluster: ...
