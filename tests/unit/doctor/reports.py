"""Doctor reports and plans built by hand for the tests of what the doctor does and says."""

from __future__ import annotations

import sys

from launcher.doctor.clock import ClockOffset
from launcher.doctor.report import (
    DoctorReport,
    HostFacts,
    HostResult,
    LinkResult,
    StorageResult,
    Transfer,
)
from launcher.plan.planner import HostPlan, LaunchPlan, TaskPlan
from worker.wire.tfconfig import TaskId, TFConfig

GIB = 2**30


def host(name: str, *, problem: str | None = None, offset_ms: float = 0.5,
         cpus: int = 4) -> HostResult:
    if problem is not None:
        return HostResult(name, address=f"198.18.0.{name[-1]}", target=f"root@{name}:22",
                          problem=problem, detail=f"check {name}'s sshd")
    return HostResult(name, address=f"198.18.0.{name[-1]}", target=f"root@{name}:22",
                      facts=HostFacts(6 * GIB, 8 * GIB, cpus, 4, 0.5, name),
                      clock=ClockOffset(offset_ms, 0.25))


def link(a: str, b: str, there_mbit: float, back_mbit: float, rtt_ms: float = 0.1) -> LinkResult:
    """A link whose streams lasted one second each."""
    return LinkResult(a, b, rtt_ms, Transfer(a, b, int(there_mbit * 1e6 / 8), 1.0),
                      Transfer(b, a, int(back_mbit * 1e6 / 8), 1.0))


def three_hosts_h2_slow(**extra: object) -> DoctorReport:
    """h1, h2, h3; everything into h2 is rate-limited to 20 Mbit/s, the rest runs at 3 Gbit/s."""
    return DoctorReport(
        hosts=(host("h1"), host("h2", offset_ms=-3.0), host("h3", offset_ms=1.0)),
        links=(link("h1", "h2", 19.5, 3000.0), link("h1", "h3", 3000.0, 3100.0),
               link("h2", "h3", 2900.0, 19.0)),
        storage=(StorageResult("h1", "/ckpt", 64 * 2**20, 0.5, 64 * 2**20, 0.25),),
        notes=(), duration_s=7.5)


def launch_plan(*hosts: tuple[str, bool, str, int], checkpoint_dir: str | None = None
                ) -> LaunchPlan:
    """Hosts ``(name, local, ssh address, task port)``, one task each, the chief first;
    TF_CONFIG gives the task of the Nth host the address 10.0.0.N (not its SSH address)."""
    cluster = {"chief": (f"10.0.0.1:{hosts[0][3]}",),
               "worker": tuple(f"10.0.0.{i + 2}:{h[3]}" for i, h in enumerate(hosts[1:]))}
    plans = []
    for index, (name, local, address, port) in enumerate(hosts):
        task = TaskId("chief", 0) if index == 0 else TaskId("worker", index - 1)
        plans.append(HostPlan(name=name, local=local, address=address, python=sys.executable,
                              tasks=(TaskPlan(task, name, port, TFConfig(cluster, task),
                                              ("x",), {}, "."),)))
    return LaunchPlan(job="j", attempt=0, run_dir="", checkpoint_dir=checkpoint_dir,
                      resume=None, hosts=tuple(plans), heartbeat_interval_s=1.0,
                      grace_period_s=1.0)
