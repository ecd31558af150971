"""The one probe, run for real on this machine: the tfcluster version a workdir's ``worker`` is,
a user's own ``worker.py`` shadowing tfcluster's, and the shared checkpoint dir's marker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.backends.local.probe import LocalProbeRunner
from launcher.plan.planner import HostPlan, LaunchPlan, TaskPlan
from launcher.preflight.group import run_preflight
from launcher.preflight.report import HostReport, PreflightReport
from tests.support.jobs import REPO
from worker.wire.module_start import MARKER
from worker.wire.tfconfig import TaskId, TFConfig
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(60)


def local_plan(workdir: Path, checkpoint_dir: Path | None, hosts: int = 1) -> LaunchPlan:
    plans = []
    cluster = {"chief": ("localhost:1",), "worker": tuple("localhost:1" for _ in range(hosts - 1))}
    for index in range(hosts):
        task = TaskId("chief", 0) if index == 0 else TaskId("worker", index - 1)
        plan = TaskPlan(task=task, host=f"h{index}", port=None,
                        tf_config=TFConfig(cluster=cluster, task=task), argv=(sys.executable,),
                        env={}, cwd=str(workdir))
        plans.append(HostPlan(name=f"h{index}", local=True, address="localhost",
                              python=sys.executable, tasks=(plan,)))
    return LaunchPlan(job="probe", attempt=0, run_dir=str(workdir),
                      checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir),
                      resume=None, hosts=tuple(plans), heartbeat_interval_s=1.0,
                      grace_period_s=1.0)


def only(report: PreflightReport) -> HostReport:
    assert len(report.hosts) == 1
    return report.hosts[0]


class SharedLocalRunner(LocalProbeRunner):
    """This machine's hosts as if they were nodes sharing a filesystem (they do)."""

    shared_checkpoint_dir = True


def test_the_checkout_is_this_tfcluster(tmp_path: Path) -> None:
    host = only(run_preflight(local_plan(REPO, tmp_path / "ckpt"), LocalProbeRunner(30)))
    assert host.ok, host
    assert (host.worker, host.tfcluster, host.checkpoint) == ("ok", TFCLUSTER_VERSION, "ok")


def other_checkout(where: Path) -> Path:
    """A checkout of another tfcluster version: its ``worker`` has the file that marks
    tfcluster's own (which the agent, the tasks and the probe keep first on ``sys.path``)."""
    (where / "worker" / "wire").mkdir(parents=True)
    (where / "worker" / "__init__.py").write_text('__version__ = "0.0.0+other"\n')
    (where / MARKER).write_text("")
    return where


def test_another_tfcluster_version_in_the_workdir_is_refused(tmp_path: Path) -> None:
    other_checkout(tmp_path)
    host = only(run_preflight(local_plan(tmp_path, None), LocalProbeRunner(30)))
    assert host.problems == [f"tfcluster 0.0.0+other here but {TFCLUSTER_VERSION} on the "
                             "coordinator"]
    assert host.tfcluster == "0.0.0+other (DIFFERS)"


def test_a_users_own_worker_module_does_not_stand_in_for_tfclusters(tmp_path: Path) -> None:
    """The probe finds the ``worker`` the agent and the tasks will import: tfcluster's, not a
    ``worker.py`` of the user's in the workdir (which they never import in its place)."""
    (tmp_path / "worker.py").write_text("raise SystemExit('my own worker')\n")
    host = only(run_preflight(local_plan(tmp_path, None), LocalProbeRunner(30)))
    assert host.ok, host
    assert (host.worker, host.tfcluster) == ("ok", TFCLUSTER_VERSION)


def test_a_shared_checkpoint_dir_is_written_once_read_everywhere_and_left_clean(
        tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt" / "deep"
    report = run_preflight(local_plan(REPO, checkpoint, hosts=3), SharedLocalRunner(30))
    assert report.ok, report
    assert [h.checkpoint for h in report.hosts] == ["ok", "ok", "ok"]
    assert list(checkpoint.iterdir()) == []  # the marker is removed again


def test_a_shared_checkpoint_dir_the_chief_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    report = run_preflight(local_plan(REPO, tmp_path / "file" / "ckpt", hosts=2),
                           SharedLocalRunner(30))
    chief, other = report.hosts
    assert chief.checkpoint == "NOT WRITABLE"
    assert chief.problems[0].startswith(f"cannot write to the checkpoint dir {tmp_path}")
    assert other.ok and other.checkpoint == "-"


def probe_answer(python: str, pythonpath: Path | None) -> dict[str, object]:
    import json
    import os
    import subprocess

    from launcher.preflight.probe_code import PROBE, PROBE_TAG

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([python, "-c", PROBE, "{}"], env=env, capture_output=True, text=True,
                          timeout=30, check=True)
    line, = [line for line in done.stdout.splitlines() if line.startswith(PROBE_TAG)]
    answer: dict[str, object] = json.loads(line[len(PROBE_TAG):])
    return answer


def test_the_probe_reads_tensorflows_version_as_package_metadata_gives_it(tmp_path: Path) -> None:
    import importlib.metadata
    import shutil

    # this interpreter's: the same as importlib.metadata (what the probe read before)
    here = probe_answer(sys.executable, None)
    assert here["tensorflow_dist"] == "tensorflow-cpu"
    assert here["tensorflow"] == importlib.metadata.version("tensorflow-cpu")
    # another interpreter, without TensorFlow: none, then one installed on its path
    other = shutil.which("python3", path="/usr/bin")
    assert other is not None
    assert "tensorflow" not in probe_answer(other, tmp_path)
    (tmp_path / "Tensorflow_Intel-2.99.1.dist-info").mkdir()
    (tmp_path / "unrelated-1.0.dist-info").mkdir()
    answer = probe_answer(other, tmp_path)
    assert (answer["tensorflow_dist"], answer["tensorflow"]) == ("tensorflow-intel", "2.99.1")
