"""``tfcluster doctor``: every host of a plan measured as one job would use it, then reported per
host (Fabric's ``GroupResult``: try every host, then say which could not be reached and why).

1. Every host at once: reach it through the engine, start its program, wait for its hello
   (:mod:`launcher.doctor.host`); a host that cannot be reached is reported and left out.
2. Every host at once: its memory and CPUs, and a few clock readings against the coordinator's.
3. The links, when the hosts are more than this machine: each host serves a port at its tasks'
   TF_CONFIG address (on a task port where free); then, in rounds of disjoint pairs
   (:mod:`launcher.doctor.schedule`), each pair's round trip and a stream each way.
4. The checkpoint directory, one host after another: the chief's host, or every host when the
   engine's hosts share it (they all read it when the job restarts).

Every step is bounded by its request's time: the whole run ends in a bounded time whatever the
hosts do.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence

from launcher.doctor.clock import ClockOffset, ClockSample, clock_offset
from launcher.doctor.host import HELLO_TIMEOUT_S, DoctorHost, HostLost, RequestFailed
from launcher.doctor.report import (
    DoctorReport,
    HostFacts,
    HostResult,
    LinkResult,
    StorageResult,
    Transfer,
)
from launcher.doctor.schedule import pair_rounds
from launcher.doctor.targets import Target, has_links, linked, targets
from launcher.plan.planner import LaunchPlan
from launcher.preflight.runner import ProbeError, ProbeRunner
from worker.wire.doctor import IO_TIMEOUT_S, Op

#: Each way of each link streams this long.
STREAM_S = 1.0
#: Round trips per link: at most this many, for at most this long.
RTT_COUNT = 200
RTT_BUDGET_S = 0.5
#: The checkpoint dir's test file: at most this big, written for at most this long.
STORAGE_BYTES = 64 * 2**20
STORAGE_BUDGET_S = 2.0
CLOCK_SAMPLES = 5
#: How long a host may take to answer a quick request (facts, clock, serve).
QUICK_TIMEOUT_S = 10.0
#: A stream: its time, then the peer's connect and its last confirmation, each bounded there.
STREAM_TIMEOUT_S = STREAM_S + 2 * IO_TIMEOUT_S + 5.0
STORAGE_TIMEOUT_S = 60.0


def run_doctor(launch_plan: LaunchPlan, runner: ProbeRunner) -> DoctorReport:
    """Measure every host of ``launch_plan`` through ``runner`` (see the module docstring)."""
    started = time.monotonic()
    found = targets(launch_plan)
    problems: dict[str, ProbeError] = {}
    hosts = _open_all(found, runner, problems)
    notes = [f"{h.name}: warning: {w}" for h in hosts.values() for w in h.report.warnings]
    try:
        facts: dict[str, HostFacts] = {}
        clocks: dict[str, ClockOffset] = {}
        _each(list(hosts.values()), lambda h: _describe(h, facts, clocks), problems)
        links: list[LinkResult] = []
        if has_links(found):
            links = _links(found, hosts, problems)
        else:
            notes.append("every task runs on this machine: no links between hosts to measure")
        storage = _storage(launch_plan, found, runner, hosts, problems=problems, notes=notes)
    finally:
        for host in hosts.values():
            host.close()
    results = tuple(HostResult(t.name, t.address, hosts[t.name].report.target
                               if t.name in hosts else runner.describe(t.plan),
                               facts.get(t.name), clocks.get(t.name),
                               problems[t.name].summary if t.name in problems else None,
                               problems[t.name].detail if t.name in problems else "")
                    for t in found)
    kept = tuple(link for link in links if link.a not in problems and link.b not in problems)
    return DoctorReport(results, kept, tuple(storage), tuple(notes),
                        time.monotonic() - started)


def _lost(host: DoctorHost, problems: dict[str, ProbeError], error: ProbeError) -> None:
    problems.setdefault(host.name, error)
    host.close()


def _each(hosts: Sequence[DoctorHost], work: Callable[[DoctorHost], None],
          problems: dict[str, ProbeError]) -> None:
    """``work`` on every host at once, each in its thread (each request bounded there); a host
    lost meanwhile is recorded in ``problems``."""
    def run(host: DoctorHost) -> None:
        try:
            work(host)
        except ProbeError as exc:
            _lost(host, problems, exc)
        except Exception as exc:  # a bug here must still end as one line about the host
            _lost(host, problems, HostLost(f"could not be measured: {exc!r}"))

    threads = [threading.Thread(target=run, args=(h,), name=f"doctor-{h.name}", daemon=True)
               for h in hosts if h.name not in problems]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _open_all(found: Sequence[Target], runner: ProbeRunner,
              problems: dict[str, ProbeError]) -> dict[str, DoctorHost]:
    """Every host reached and its program started, at once; those that cannot be within the
    runner's time (plus the program's hello) are closed and recorded in ``problems``."""
    hosts = {t.name: DoctorHost(t, runner) for t in found}
    opened: set[str] = set()
    lock = threading.Lock()

    def open_one(host: DoctorHost) -> None:
        try:
            host.open()
        except Exception as exc:  # ProbeError, or a bug: still one line about the host
            error = exc if isinstance(exc, ProbeError) else HostLost(f"cannot start: {exc!r}")
            with lock:
                problems.setdefault(host.name, error)
            host.close()
            return
        with lock:
            opened.add(host.name)

    threads = [threading.Thread(target=open_one, args=(h,), name=f"doctor-open-{h.name}",
                                daemon=True) for h in hosts.values()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + runner.timeout_s + HELLO_TIMEOUT_S + 1.0
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        for host in hosts.values():
            if host.name not in opened and host.name not in problems:
                problems[host.name] = HostLost(
                    f"no answer within {runner.timeout_s + HELLO_TIMEOUT_S:g}s ({host.stage})")
                host.close()
        return {name: host for name, host in hosts.items() if name in opened}


def _describe(host: DoctorHost, facts: dict[str, HostFacts],
              clocks: dict[str, ClockOffset]) -> None:
    """The host's facts and clock offset (RequestFailed cannot happen for these: they do not
    fail but by the host being lost)."""
    try:
        answer = host.request(Op.FACTS, QUICK_TIMEOUT_S)
        facts[host.name] = HostFacts(
            memory_available=_optional_int(answer.get("memory_available")),
            memory_total=int(answer.get("memory_total") or 0), cpus=int(answer.get("cpus") or 0),
            cpu_count=int(answer.get("cpu_count") or 0),
            load1=None if answer.get("load1") is None else float(answer["load1"]),
            hostname=str(answer.get("hostname") or ""))
        samples = []
        for _ in range(CLOCK_SAMPLES):
            sent = time.time()
            remote = float(host.request(Op.CLOCK, QUICK_TIMEOUT_S)["time"])
            samples.append(ClockSample(sent, remote, time.time()))
        clocks[host.name] = clock_offset(samples)
    except (RequestFailed, ValueError, TypeError, KeyError) as exc:
        raise HostLost(f"its program answered nonsense: {exc}") from exc


def _optional_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _links(found: Sequence[Target], hosts: dict[str, DoctorHost],
           problems: dict[str, ProbeError]) -> list[LinkResult]:
    ports: dict[str, int] = {}

    def serve(host: DoctorHost) -> None:
        try:
            answer = host.request(Op.SERVE, QUICK_TIMEOUT_S, address=host.target.address,
                                  ports=list(host.target.ports))
        except RequestFailed as exc:
            raise HostLost(f"cannot serve a port for its peers at {host.target.address}: "
                           f"{exc}") from exc
        ports[host.name] = int(answer["port"])

    _each(list(hosts.values()), serve, problems)
    by_name = {t.name: t for t in found}
    links: list[LinkResult] = []
    for pairs in pair_rounds([t.name for t in found]):
        live = [(a, b) for a, b in pairs if linked(by_name[a], by_name[b])
                and a in ports and b in ports and a not in problems and b not in problems]
        threads = [threading.Thread(target=_measure_link, name=f"doctor-{a}-{b}", daemon=True,
                                    args=(hosts[a], hosts[b], ports, problems, links))
                   for a, b in live]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    order = {t.name: i for i, t in enumerate(found)}
    return sorted(links, key=lambda link: (order[link.a], order[link.b]))


def _measure_link(a: DoctorHost, b: DoctorHost, ports: dict[str, int],
                  problems: dict[str, ProbeError], links: list[LinkResult]) -> None:
    try:
        links.append(_link(a, b, ports, problems))
    except Exception as exc:  # a bug here must still end as one line about the link
        links.append(LinkResult(a.name, b.name, problem=f"could not be measured: {exc!r}"))


def _link(a: DoctorHost, b: DoctorHost, ports: dict[str, int],
          problems: dict[str, ProbeError]) -> LinkResult:
    """Round trips from ``a`` to ``b``, then a stream each way."""
    try:
        answer = a.request(Op.RTT, RTT_BUDGET_S + IO_TIMEOUT_S + 5.0, address=b.target.address,
                           port=ports[b.name], count=RTT_COUNT, budget_s=RTT_BUDGET_S)
        rtt = statistics.median(float(s) for s in answer["samples_ms"])
        there = _stream(a, b, ports)
        back = _stream(b, a, ports)
    except RequestFailed as exc:
        return LinkResult(a.name, b.name, problem=str(exc))
    except (KeyError, ValueError, TypeError) as exc:
        return LinkResult(a.name, b.name, problem=f"a bad answer: {exc!r}")
    except HostLost as exc:
        lost = a if a.lost else b
        _lost(lost, problems, exc)
        return LinkResult(a.name, b.name, problem=f"{lost.name} lost: {exc.summary}")
    return LinkResult(a.name, b.name, rtt, there, back)


def _stream(sender: DoctorHost, receiver: DoctorHost, ports: dict[str, int]) -> Transfer:
    try:
        answer = sender.request(Op.STREAM, STREAM_TIMEOUT_S, address=receiver.target.address,
                                port=ports[receiver.name], seconds=STREAM_S)
    except RequestFailed as exc:
        raise RequestFailed(f"{sender.name} -> {receiver.name}: {exc}") from exc
    return Transfer(sender.name, receiver.name, int(answer["bytes"]), float(answer["elapsed_s"]))


def _storage(launch_plan: LaunchPlan, found: Sequence[Target], runner: ProbeRunner,
             hosts: dict[str, DoctorHost], *, problems: dict[str, ProbeError],
             notes: list[str]) -> list[StorageResult]:
    directory = launch_plan.checkpoint_dir
    if directory is None or not launch_plan.tasks:
        notes.append("no checkpoint.dir in the spec: no storage to measure")
        return []
    chief = launch_plan.chief_host.name
    readers = [t.name for t in found] if runner.shared_checkpoint_dir else [chief]
    results = []
    for name in readers:
        host = hosts.get(name)
        if host is None or name in problems:
            continue
        try:
            answer = host.request(Op.STORAGE, STORAGE_TIMEOUT_S, dir=directory,
                                  size_bytes=STORAGE_BYTES, budget_s=STORAGE_BUDGET_S)
        except RequestFailed as exc:
            results.append(StorageResult(name, directory, problem=str(exc)))
            continue
        except HostLost as exc:
            _lost(host, problems, exc)
            continue
        try:
            results.append(StorageResult(name, directory, int(answer["write_bytes"]),
                                         float(answer["write_s"]), int(answer["read_bytes"]),
                                         float(answer["read_s"]), bool(answer["cache_dropped"])))
        except (KeyError, ValueError, TypeError) as exc:
            results.append(StorageResult(name, directory, problem=f"a bad answer: {exc!r}"))
    return results
