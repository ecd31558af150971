"""Every host at once over a scripted engine: the per-host reports, a host that overruns, one that
cannot be reached, and the shared checkpoint dir's marker (the chief's first, then the others)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from launcher.plan.planner import HostPlan, LaunchPlan, TaskPlan
from launcher.preflight.group import run_preflight
from launcher.preflight.report import HostReport, Layout
from launcher.preflight.runner import ProbeError, ProbeOutput, ProbeProcess
from worker.wire.tfconfig import TaskId, TFConfig
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(30)


def launch_plan(*names: str, checkpoint_dir: str | None = "/ckpt") -> LaunchPlan:
    hosts = []
    cluster = {"chief": (f"{names[0]}:2222",),
               "worker": tuple(f"{n}:{2222 + i}" for i, n in enumerate(names) if i)}
    for index, name in enumerate(names):
        task = TaskId("chief", 0) if index == 0 else TaskId("worker", index - 1)
        plan = TaskPlan(task=task, host=name, port=2222 + index,
                        tf_config=TFConfig(cluster=cluster, task=task), argv=("python3",), env={},
                        cwd="/srv")
        hosts.append(HostPlan(name=name, local=False, address=name, python="python3",
                              tasks=(plan,)))
    return LaunchPlan(job="j", attempt=0, run_dir="/runs/j", checkpoint_dir=checkpoint_dir,
                      resume=None, hosts=tuple(hosts), heartbeat_interval_s=1.0,
                      grace_period_s=1.0)


@dataclass
class Script:
    """What the fake engine does on each host, and what it saw."""

    hang: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    marker_fails: bool = False
    requests: dict[str, dict[str, object]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)
    dir_checked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeSession:
    def __init__(self, host: HostPlan, script: Script) -> None:
        self.host, self.script = host, script
        self.released = threading.Event()

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        request = json.loads(argv[-1])
        with self.script.lock:
            self.script.requests[self.host.name] = request
            self.script.order.append(self.host.name)
        if self.host.name in self.script.hang:
            self.released.wait(20)
            raise ProbeError("closed")
        answer: dict[str, object] = {"python": "3.11.7", "worker": "w",
                                     "tfcluster": TFCLUSTER_VERSION, "tensorflow": "2.16.1",
                                     "busy_ports": {}}
        if request.get("marker"):
            answer["marker"] = "NOT WRITABLE" if self.script.marker_fails else "ok"
            if self.script.marker_fails:
                answer["marker_error"] = "cannot write to the checkpoint dir /ckpt"
        return ProbeOutput(0, b"TFCLUSTER-PREFLIGHT " + json.dumps(answer).encode(), b"", "/srv")

    def start(self, argv: Sequence[str]) -> ProbeProcess:
        raise AssertionError("pre-flight runs its probe to its end, it starts no program")

    def explain(self, output: ProbeOutput) -> ProbeError:
        return ProbeError("no answer")

    def checkpoint_dir_problem(self, path: str) -> str | None:
        self.script.dir_checked.append(f"{self.host.name}:{path}")
        return None

    def close(self) -> None:
        with self.script.lock:
            self.script.closed.add(self.host.name)
        self.released.set()


class FakeRunner:
    layout: Layout = "table"

    def __init__(self, script: Script, *, shared: bool = False, timeout_s: float = 1.0) -> None:
        self.script, self.shared_checkpoint_dir, self.timeout_s = script, shared, timeout_s

    def describe(self, host: HostPlan) -> str:
        return f"fake {host.name}"

    def open(self, host: HostPlan, report: HostReport) -> FakeSession:
        if host.name in self.script.unreachable:
            report.connect = "FAILED"
            raise ProbeError(f"unreachable: {host.name}", f"cannot connect to {host.name}")
        return FakeSession(host, self.script)


def test_every_host_reports_and_an_overrunning_one_is_given_up_and_closed() -> None:
    script = Script(hang={"c"}, unreachable={"b"})
    report = run_preflight(launch_plan("a", "b", "c", "d"), FakeRunner(script))
    by_host = {h.host: h for h in report.hosts}
    assert [h.host for h in report.hosts] == ["a", "b", "c", "d"]
    assert by_host["a"].ok and by_host["a"].checkpoint == "ok" and by_host["d"].ok
    assert script.dir_checked == ["a:/ckpt"]  # the chief's host only
    assert (by_host["b"].connect, by_host["b"].problems) == ("FAILED", ["unreachable: b"])
    assert by_host["b"].details == ["cannot connect to b"]
    assert by_host["c"].problems == ["no answer within 1s (probing python)"]
    assert by_host["c"].target == "fake c"
    assert "c" in script.closed
    assert report.duration_s < 1.0 + 0.5 + 0.5
    assert not report.ok


def test_a_shared_checkpoint_dir_is_written_by_the_chief_first_then_read_by_the_others() -> None:
    script = Script()
    report = run_preflight(launch_plan("a", "b", "c"), FakeRunner(script, shared=True))
    assert report.ok, report
    assert script.order[0] == "a" and set(script.order) == {"a", "b", "c"}
    marker = script.requests["a"]["marker"]
    assert isinstance(marker, dict) and marker["role"] == "write" and marker["dir"] == "/ckpt"
    for reader in ("b", "c"):
        assert script.requests[reader]["marker"] == {**marker, "role": "read"}
    assert script.dir_checked == []  # no per-host check on a shared filesystem
    assert [h.checkpoint for h in report.hosts] == ["ok", "ok", "ok"]


def test_when_the_chief_cannot_write_the_marker_the_others_are_not_asked_to_read_it() -> None:
    script = Script(marker_fails=True)
    report = run_preflight(launch_plan("a", "b"), FakeRunner(script, shared=True))
    assert [h.host for h in report.hosts if not h.ok] == ["a"]
    assert report.hosts[0].checkpoint == "NOT WRITABLE"
    assert script.requests["b"]["marker"] is None


def test_without_a_checkpoint_dir_nothing_is_checked_there() -> None:
    script = Script()
    report = run_preflight(launch_plan("a", "b", checkpoint_dir=None),
                           FakeRunner(script, shared=True))
    assert report.ok and all(r["marker"] is None for r in script.requests.values())
    assert [h.checkpoint for h in report.hosts] == ["-", "-"]
