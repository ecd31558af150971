"""The probe of this machine started early (``launcher.preflight.early_probe``), for real: it
answers the check of a local host whose probe it is, with what a probe started then would say
(the request it is sent on stdin included); any other check starts its own; one that does not
answer in time is replaced; none is left behind."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from launcher.backends.local.probe import EARLY_ANSWER_S, LocalProbeRunner
from launcher.plan.planner import HostPlan, LaunchPlan, TaskPlan
from launcher.preflight.early_probe import EarlyProbe
from launcher.preflight.group import run_preflight
from launcher.preflight.probe import HostWork, probe_argv
from launcher.preflight.report import HostReport
from worker.wire.tfconfig import TaskId, TFConfig
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(60)


def plan(workdir: Path, script: str) -> LaunchPlan:
    """worker:0 running ``script`` on this machine, in ``workdir``."""
    task = TaskId("worker", 0)
    argv = (sys.executable, "-m", "worker.runtime.bootstrap", script)
    host = HostPlan(name="localhost", local=True, address="localhost", python=sys.executable,
                    tasks=(TaskPlan(task=task, host="localhost", port=None,
                                    tf_config=TFConfig(cluster={"worker": ("localhost:1",)},
                                                       task=task),
                                    argv=argv, env={}, cwd=str(workdir)),))
    return LaunchPlan(job="early", attempt=0, run_dir=str(workdir), checkpoint_dir=None,
                      resume=None, hosts=(host,), heartbeat_interval_s=1.0, grace_period_s=1.0)


def check(launch_plan: LaunchPlan, early: EarlyProbe | None) -> HostReport:
    (host,) = run_preflight(launch_plan, LocalProbeRunner(30, early=early)).hosts
    return host


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_it_answers_the_check_of_its_host_as_a_probe_started_then_would(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    for script in ("train.py", "trian.py"):
        early = EarlyProbe(sys.executable, str(tmp_path))
        pid = early.pid
        assert pid is not None and alive(pid)
        host = check(plan(tmp_path, script), early)
        fresh = check(plan(tmp_path, script), None)
        assert (host.ok, host.problems, host.worker, host.tfcluster, host.tensorflow) == (
            fresh.ok, fresh.problems, fresh.worker, fresh.tfcluster, fresh.tensorflow)
        assert host.tfcluster == TFCLUSTER_VERSION
        assert early.pid is None and not alive(pid)  # taken, answered, gone
    assert host.problems == ["entrypoint.script trian.py: no such file in "
                             f"{tmp_path} (worker:0)"], host.problems


def test_a_check_elsewhere_starts_its_own_and_the_early_one_is_killed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    early = EarlyProbe(sys.executable, str(tmp_path / "a"))
    pid = early.pid
    assert pid is not None
    launch_plan = plan(tmp_path / "b", "train.py")
    work = HostWork(launch_plan.hosts[0], (), None)
    assert early.take(probe_argv(work), str(tmp_path / "b")) is None
    assert not check(launch_plan, early).ok  # its own probe: train.py is missing in b
    assert early.pid == pid and alive(pid)
    early.discard()
    assert early.pid is None and not alive(pid)


def test_one_that_does_not_answer_in_time_is_replaced(tmp_path: Path) -> None:
    """Run at the lowest priority, it may get no CPU on a busy machine: after
    ``EARLY_ANSWER_S`` the check starts a probe of its own, which answers."""
    (tmp_path / "train.py").write_text("")
    early = EarlyProbe(sys.executable, str(tmp_path))
    pid = early.pid
    assert pid is not None
    psutil.Process(pid).send_signal(signal.SIGSTOP)  # as if it never got the CPU
    started = time.monotonic()
    host = check(plan(tmp_path, "train.py"), early)
    assert time.monotonic() - started >= EARLY_ANSWER_S  # it was given its chance
    assert host.ok and host.tfcluster == TFCLUSTER_VERSION, host.problems
    assert not alive(pid)


def test_one_that_ended_before_its_request_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    early = EarlyProbe(sys.executable, str(tmp_path))
    pid = early.pid
    assert pid is not None
    process = psutil.Process(pid)
    process.kill()
    process.wait(10)
    host = check(plan(tmp_path, "train.py"), early)
    assert host.ok and host.tfcluster == TFCLUSTER_VERSION, host.problems
