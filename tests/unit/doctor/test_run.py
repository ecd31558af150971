"""The doctor's whole run over scripted hosts (a fake engine whose programs answer from a script):
every pair measured each way, the slow host named, and a host that cannot be reached, runs another
version, or stops answering reported in one line within its request's time while the others are
still measured."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from launcher.doctor import host as doctor_host
from launcher.doctor import run as doctor_run
from launcher.doctor.findings import findings
from launcher.doctor.report import DoctorReport
from launcher.doctor.run import run_doctor
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.preflight.report import HostReport, Layout
from launcher.preflight.runner import ProbeError, ProbeOutput
from tests.unit.doctor.reports import launch_plan
from worker.wire.version import TFCLUSTER_VERSION

#: What a scripted host answers a request with: the answer's fields, or None to never answer.
Script = Callable[[str, dict[str, Any]], dict[str, Any] | None]

#: h2's link is rate-limited: what is streamed to it arrives at 20 Mbit/s, elsewhere at 1 Gbit/s.
SLOW_ADDRESS = "10.0.0.2"


def healthy(host: str, request: dict[str, Any]) -> dict[str, Any] | None:
    op = request["op"]
    if op == "facts":
        return {"memory_available": 2**30, "memory_total": 2**31, "cpus": 2, "cpu_count": 4,
                "load1": 0.5, "hostname": host}
    if op == "clock":
        return {"time": time.time()}
    if op == "serve":
        return {"port": max([*request["ports"], 0]) or 40000, "bound": request["address"]}
    if op == "rtt":
        return {"samples_ms": [0.2, 0.1, 0.3]}
    if op == "stream":
        rate_mbit = 20 if request["address"] == SLOW_ADDRESS else 1000
        return {"bytes": rate_mbit * 10**6 // 8, "elapsed_s": 1.0}
    if op == "storage":
        return {"write_bytes": 10**8, "write_s": 0.5, "read_bytes": 10**8, "read_s": 0.25,
                "cache_dropped": True}
    raise AssertionError(op)


class FakeProgram:
    """A host's program: says ``hello`` (of ``version``), then answers as ``script`` says."""

    def __init__(self, host: str, script: Script, requests: list[tuple[str, dict[str, Any]]],
                 version: str) -> None:
        self.host, self.script, self.requests = host, script, requests
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.closed = threading.Event()
        self.lines.put(json.dumps({"op": "hello", "tfcluster_version": version}).encode() + b"\n")

    def write(self, data: bytes) -> None:
        if self.closed.is_set():
            raise OSError("closed")
        request = json.loads(data)
        self.requests.append((self.host, request))
        answer = self.script(self.host, request)
        if answer is not None:
            ok = "error" not in answer
            self.lines.put(json.dumps({"id": request["id"], "ok": ok, **answer}).encode() + b"\n")

    def readline(self) -> bytes:
        return self.lines.get()

    def finish(self, timeout_s: float) -> ProbeOutput:
        self.close()
        return ProbeOutput(0, b"", b"", ".")

    def close(self) -> None:
        self.closed.set()
        self.lines.put(b"")


class FakeSession:
    def __init__(self, program: FakeProgram | None) -> None:
        self.program = program
        self.closed = False

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        raise AssertionError("the doctor starts its program, it does not run one")

    def start(self, argv: Sequence[str]) -> FakeProgram:
        assert argv[-2:] == ["-m", "worker.doctor"]
        if self.program is None:
            raise ProbeError("python not found: /nope/python3")
        return self.program

    def explain(self, output: ProbeOutput) -> ProbeError:
        return ProbeError("the program exited")

    def checkpoint_dir_problem(self, path: str) -> str | None:
        return None

    def close(self) -> None:
        self.closed = True


class FakeRunner:
    layout: Layout = "table"

    def __init__(self, script: Script = healthy, *, unreachable: Sequence[str] = (),
                 no_python: Sequence[str] = (), versions: dict[str, str] | None = None,
                 shared: bool = False) -> None:
        self.timeout_s = 1.0
        self.shared_checkpoint_dir = shared
        self.script = script
        self.unreachable, self.no_python = unreachable, no_python
        self.versions = versions or {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.sessions: list[FakeSession] = []

    def describe(self, host: HostPlan) -> str:
        return f"fake {host.name}"

    def open(self, host: HostPlan, report: HostReport) -> FakeSession:
        if host.name in self.unreachable:
            raise ProbeError("cannot connect: timed out", f"is {host.name} up?")
        program = None if host.name in self.no_python else FakeProgram(
            host.name, self.script, self.requests, self.versions.get(host.name, TFCLUSTER_VERSION))
        self.sessions.append(FakeSession(program))
        return self.sessions[-1]


def three_hosts(checkpoint_dir: str | None = "/ckpt") -> LaunchPlan:
    return launch_plan(("h1", False, "ssh-h1", 2222), ("h2", False, "ssh-h2", 2223),
                       ("h3", False, "ssh-h3", 0), checkpoint_dir=checkpoint_dir)


def kinds(report: DoctorReport) -> dict[str, str]:
    return {f.kind: f.subject for f in findings(report)}


def test_every_pair_is_measured_each_way_and_the_slow_host_named() -> None:
    runner = FakeRunner()
    report = run_doctor(three_hosts(), runner)
    assert report.ok, report.problems()
    assert [(link.a, link.b) for link in report.links] == [("h1", "h2"), ("h1", "h3"),
                                                          ("h2", "h3")]
    assert all(link.a_to_b is not None and link.b_to_a is not None for link in report.links)
    assert report.links[0].mbit_s == pytest.approx(20.0)
    assert report.links[0].rtt_ms == pytest.approx(0.2)  # the median round trip
    assert kinds(report)["slowest_host"] == "h2"
    # peers reach a host at its tasks' TF_CONFIG address, on its task port when it has one
    serves = {h: r for h, r in runner.requests if r["op"] == "serve"}
    assert serves["h1"]["address"] == "10.0.0.1" and serves["h1"]["ports"] == [2222]
    assert serves["h3"]["ports"] == []
    streams = [(h, r["address"], r["port"]) for h, r in runner.requests if r["op"] == "stream"]
    assert ("h1", "10.0.0.2", 2223) in streams and ("h2", "10.0.0.1", 2222) in streams
    assert [s.host for s in report.storage] == ["h1"]  # the chief's host alone
    assert all(h.facts is not None and h.clock is not None for h in report.hosts)
    assert all(abs(h.clock.offset_ms) < 100 for h in report.hosts if h.clock)
    assert all(s.closed for s in runner.sessions)


def test_on_a_shared_checkpoint_dir_every_host_measures_it() -> None:
    report = run_doctor(three_hosts(), FakeRunner(shared=True))
    assert [s.host for s in report.storage] == ["h1", "h2", "h3"]


def test_without_a_checkpoint_dir_a_note_says_so() -> None:
    report = run_doctor(three_hosts(checkpoint_dir=None), FakeRunner())
    assert report.storage == ()
    assert "no checkpoint.dir in the spec: no storage to measure" in report.notes


def test_an_unreachable_host_is_one_line_and_the_others_are_still_measured() -> None:
    report = run_doctor(three_hosts(), FakeRunner(unreachable=["h3"], no_python=["h2"]))
    assert report.problems() == ["h2: python not found: /nope/python3",
                                 "h3: cannot connect: timed out"]
    assert next(h for h in report.hosts if h.host == "h3").detail == "is h3 up?"
    assert report.links == () and not report.ok
    assert [s.host for s in report.storage] == ["h1"]


def test_another_tfcluster_version_is_refused_with_what_to_do() -> None:
    report = run_doctor(three_hosts(), FakeRunner(versions={"h2": "0.0.1"}))
    h2 = next(h for h in report.hosts if h.host == "h2")
    assert h2.problem == f"tfcluster 0.0.1 there, {TFCLUSTER_VERSION} on the coordinator"
    assert h2.detail.startswith(f"install tfcluster {TFCLUSTER_VERSION} on h2")
    assert [(link.a, link.b) for link in report.links] == [("h1", "h3")]


def test_a_host_that_stops_answering_is_lost_within_its_request_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_run, "STREAM_TIMEOUT_S", 1.0)

    def hangs_streaming(host: str, request: dict[str, Any]) -> dict[str, Any] | None:
        if host == "h2" and request["op"] == "stream":
            return None
        return healthy(host, request)

    started = time.monotonic()
    report = run_doctor(three_hosts(), FakeRunner(hangs_streaming))
    assert time.monotonic() - started < 5
    assert report.problems() == ["h2: no answer within 1s (stream request)"]
    assert [(link.a, link.b) for link in report.links] == [("h1", "h3")]


def test_a_peer_that_refuses_the_stream_is_a_link_problem_between_hosts_that_answer() -> None:
    def refuses(host: str, request: dict[str, Any]) -> dict[str, Any] | None:
        if request["op"] == "stream" and request["address"] == "10.0.0.3":
            return {"error": "cannot connect to 10.0.0.3 port 40000: Connection refused"}
        return healthy(host, request)

    report = run_doctor(three_hosts(), FakeRunner(refuses))
    assert report.problems() == [
        "h1 <-> h3: h1 -> h3: cannot connect to 10.0.0.3 port 40000: Connection refused",
        "h2 <-> h3: h2 -> h3: cannot connect to 10.0.0.3 port 40000: Connection refused"]
    assert all(h.problem is None for h in report.hosts)


def test_a_program_that_never_says_hello_is_lost_after_the_hello_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_host, "HELLO_TIMEOUT_S", 0.5)
    runner = FakeRunner()
    original = runner.open

    def silent(host: HostPlan, report: HostReport) -> FakeSession:
        session = original(host, report)
        if host.name == "h3" and session.program is not None:
            session.program.lines.get_nowait()  # its hello never comes
        return session

    monkeypatch.setattr(runner, "open", silent)
    report = run_doctor(three_hosts(), runner)
    assert report.problems() == ["h3: no answer within 0.5s (waiting for its program's hello)"]


def test_lines_a_login_shell_prints_before_the_hello_are_passed_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner()
    original = runner.open

    def chatty(host: HostPlan, report: HostReport) -> FakeSession:
        session = original(host, report)
        if session.program is not None:
            hello = session.program.lines.get_nowait()
            session.program.lines.put(b"Welcome to h1! Last login: yesterday\n")
            session.program.lines.put(hello)
        return session

    monkeypatch.setattr(runner, "open", chatty)
    assert run_doctor(three_hosts(), runner).ok
