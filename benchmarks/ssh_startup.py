"""How long starting remote agents takes over SSH, for 1, 4 and 8 hosts started in parallel.

Run from the repository root (needs openssh-server: ``make sshd``)::

    .venv/bin/python benchmarks/ssh_startup.py [--sizes 1,4,8] [--repeats 7]

It starts 8 real sshd instances on 127.0.0.1 (separate ports, one temp host key each, one client
key they all accept) and, for each size N, ``--repeats`` times:

- "connect": N connections at once, each TCP + key exchange + host key check + public key
  authentication (:func:`launcher.ssh.connect.connect`), until the last one is authenticated;
- "agent up": N :meth:`SshTransport.start` calls at once, as the coordinator makes them: connect,
  exec ``cd REPO && exec PYTHON -m worker.agent``, wait for the agent's hello, send the launch
  message (no task), until the last one has returned. The agents are then closed (EOF) and their
  connections too.

It prints the medians as a table and the target (8 hosts in under 2x the time of one), with the CPU
time one host costs in all (this process plus every sshd with the sessions it reaped: sshd, the
login shell and its rc files, the agent) and the coordinator's share of it. The simulated hosts
share this machine's CPUs, so N hosts cannot start faster than N x that cost / CPUs (the "CPU
floor"); on a real cluster each host pays its share on its own CPUs and only the coordinator's
share adds up. At the end it checks that no sshd session survived, kills the servers and removes
their directories.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from common import loadavg, median, progress  # first: it puts the repository on sys.path

from launcher.backends.base import AgentEvent
from launcher.backends.ssh.agent import SshAgentHandle, SshTransport
from launcher.plan.planner import HostPlan
from launcher.ssh.config import SshHost
from launcher.ssh.connect import ConnectOptions, SshConnection, connect
from tests.ssh.sshd import Sshd, generate_key, start_sshd
from worker.wire.protocol import Launch

SERVERS = 8
TARGET_RATIO = 2.0


def host_plans(servers: Sequence[Sshd]) -> list[HostPlan]:
    return [HostPlan(name=f"node-{i}", local=False, address="127.0.0.1", python=sys.executable,
                     tasks=(), where=f"ssh 127.0.0.1:{server.port}")
            for i, server in enumerate(servers)]


def endpoints(servers: Sequence[Sshd], key: Path, known_hosts: Path) -> dict[str, SshHost]:
    """How each host is reached (what the SSH engine reads from the spec's ``hosts``)."""
    return {f"node-{i}": SshHost(name=f"node-{i}", address="127.0.0.1", ssh_port=server.port,
                                 identity_file=str(key), known_hosts=str(known_hosts))
            for i, server in enumerate(servers)}


@dataclass(frozen=True)
class Sample:
    wall_s: float  # until the last call returned
    own_cpu_s: float  # CPU time of this process (the coordinator's side) meanwhile
    #: CPU time of this process and of the sshd servers with every session they reaped (sshd,
    #: login shell, agent), from the start until every agent is closed and reaped: what one
    #: round costs whatever else runs on the machine.
    ours_cpu_s: float = 0.0


def servers_cpu(servers: Sequence[Sshd]) -> float:
    total = 0.0
    for server in servers:
        times = psutil.Process(server.proc.pid).cpu_times()
        total += float(times.user + times.system + times.children_user + times.children_system)
    return total


def in_parallel(calls: Sequence[Callable[[], object]]) -> tuple[Sample, list[object]]:
    """Run every call in its own thread, released together; timings until the last returned."""
    results: list[object] = [None] * len(calls)
    errors: queue.SimpleQueue[BaseException] = queue.SimpleQueue()
    barrier = threading.Barrier(len(calls) + 1)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # reported below, in the main thread
            errors.put(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    own = time.process_time()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - started
    sample = Sample(took, time.process_time() - own)
    if not errors.empty():
        raise errors.get()
    return sample, results


def connect_all(backend: SshTransport, hosts: Sequence[HostPlan]) -> Sample:
    targets = [backend.connector.target(backend.endpoint(h.name)) for h in hosts]
    took, connections = in_parallel([functools.partial(connect, t, backend.connector.options)
                                     for t in targets])
    for connection in connections:
        if isinstance(connection, SshConnection):
            connection.close()
    return took


def start_all(backend: SshTransport, hosts: Sequence[HostPlan], logs: Path,
              servers: Sequence[Sshd]) -> Sample:
    before = servers_cpu(servers) + time.process_time()
    events: queue.SimpleQueue[AgentEvent] = queue.SimpleQueue()
    launch = Launch(job="bench", attempt=0, tasks=[], heartbeat_interval_s=60.0)
    took, handles = in_parallel([
        functools.partial(backend.start, h, launch, events.put, logs / f"{h.name}.log")
        for h in hosts])
    for handle in handles:
        if isinstance(handle, SshAgentHandle):
            handle.close_input()
    for handle in handles:
        if isinstance(handle, SshAgentHandle):
            handle.close(timeout_s=5.0)
    for server in servers:
        server.wait_no_sessions(5.0)
    return dataclasses.replace(took, ours_cpu_s=servers_cpu(servers) + time.process_time()
                               - before)


@dataclass
class Size:
    n: int
    connect: list[Sample] = field(default_factory=list)
    start: list[Sample] = field(default_factory=list)

    def median(self, samples: str, what: str) -> float:
        return median(getattr(s, what) for s in getattr(self, samples))


def table(sizes: Sequence[Size], repeats: int) -> list[str]:
    cpus = os.cpu_count() or 1
    base = sizes[0].median("start", "wall_s")
    lines = [f"### SSH agent start-up, N hosts in parallel (median of {repeats}; {cpus} CPU(s) "
             "shared by the coordinator and every simulated host's sshd, login shell and agent)",
             "",
             "| N hosts | connect + auth (s) | agent up: connect + exec + hello (s) "
             f"| vs N={sizes[0].n} | CPU floor: N x CPU per host / {cpus} (s) "
             "| CPU per host, all processes (ms) | of which the coordinator (ms) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        start = size.median("start", "wall_s")
        per_host = size.median("start", "ours_cpu_s") / size.n
        own = size.median("start", "own_cpu_s") / size.n * 1000
        lines.append(f"| {size.n} | {size.median('connect', 'wall_s'):.3f} | {start:.3f} "
                     f"| {start / base:.2f}x | {size.n * per_host / cpus:.3f} "
                     f"| {per_host * 1000:.0f} | {own:.1f} |")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,8",
                        help=f"comma-separated host counts, at most {SERVERS} (default 1,4,8)")
    parser.add_argument("--repeats", type=int, default=7, help="runs per size (default 7)")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not args.sizes or any(not 1 <= n <= SERVERS for n in args.sizes):
        parser.error(f"sizes must be between 1 and {SERVERS}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    servers: list[Sshd] = []
    with tempfile.TemporaryDirectory(prefix="tfcluster-ssh-bench-") as tmp:
        work = Path(tmp)
        os.environ["HOME"] = str(work)  # no ~/.ssh/config or default keys of this machine
        os.environ.pop("SSH_AUTH_SOCK", None)
        try:
            key = generate_key(work / "client_key")
            servers = [start_sshd(work / f"sshd-{i}", [key]) for i in range(SERVERS)]
            known_hosts = work / "known_hosts"
            known_hosts.write_text("".join(s.known_hosts_line() for s in servers))
            hosts = host_plans(servers)
            backend = SshTransport(endpoints(servers, key, known_hosts).__getitem__)
            progress(f"connect options: {ConnectOptions()}; python {sys.version.split()[0]}")
            start_all(backend, hosts, work, servers)  # warm-up: page cache, first imports
            sizes = [Size(n) for n in args.sizes]
            for repeat in range(args.repeats):
                for size in sizes:  # interleaved, so load drifts hit every size alike
                    size.connect.append(connect_all(backend, hosts[:size.n]))
                    size.start.append(start_all(backend, hosts[:size.n], work,
                                                servers[:size.n]))
                progress(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(
                    f"N={s.n} {s.start[-1].wall_s:.3f}s" for s in sizes))
            leftovers = [p.pid for s in servers for p in s.wait_no_sessions(5)]
        finally:
            for server in servers:
                server.stop()
    print("\n".join(table(sizes, args.repeats)))
    status = 0
    one = [s for s in sizes if s.n == 1]
    eight = [s for s in sizes if s.n == SERVERS]
    if one and eight:
        ratio = eight[0].median("start", "wall_s") / one[0].median("start", "wall_s")
        verdict = "PASS" if ratio < TARGET_RATIO else "FAIL"
        print(f"\n- target: {SERVERS} hosts < {TARGET_RATIO}x one host: {ratio:.2f}x -> {verdict}")
        cpus = os.cpu_count() or 1
        per_host = eight[0].median("start", "ours_cpu_s") / SERVERS
        floor = SERVERS * per_host / cpus
        print(f"- CPU floor here: {SERVERS} hosts x {per_host * 1000:.0f} ms of CPU each (sshd, "
              f"login shell, agent, coordinator) / {cpus} CPU(s) = {floor:.2f}s, i.e. "
              f"{floor / one[0].median('start', 'wall_s'):.2f}x one host before any contention; "
              f"the coordinator's own share is "
              f"{eight[0].median('start', 'own_cpu_s') * 1000 / SERVERS:.1f} ms per host")
        status = 0 if ratio < TARGET_RATIO else 1
    print(f"- load average: {loadavg()}")
    if leftovers:
        print(f"- sshd sessions left after closing the agents (killed): {leftovers}")
        status = 1
    else:
        print("- sshd sessions left after closing the agents: none")
    return status


if __name__ == "__main__":
    sys.exit(main())
