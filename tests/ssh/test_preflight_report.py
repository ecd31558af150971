"""The pure parts of preflight: reading a probe's answer, comparing hosts, rendering the table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.plan.planner import HostPlan, TaskPlan
from launcher.preflight.checks import PROBE, local_dir_problem, read_probe
from launcher.preflight.report import HostReport, HostWork, PreflightReport, compare_tensorflow
from launcher.preflight.view import render_text
from worker.tfconfig import TaskId, TFConfig


def work(ports: tuple[int, ...] = (2222,)) -> HostWork:
    task = TaskPlan(task=TaskId("worker", 0), host="node-a", port=ports[0] if ports else None,
                    tf_config=TFConfig(cluster={"worker": ("node-a:1",)},
                                       task=TaskId("worker", 0)),
                    argv=("python3",), env={}, cwd="/srv")
    host = HostPlan(name="node-a", local=False, address="node-a", python="python3",
                    tasks=(task,))
    return HostWork(host, ports, None)


def probed(answer: dict[str, object], status: int = 0, stderr: bytes = b"") -> HostReport:
    report = HostReport("node-a", "me@node-a:22")
    stdout = b"motd noise from a .bashrc\nTFCLUSTER-PREFLIGHT " + json.dumps(answer).encode()
    read_probe(report, work(), "/srv", status=status, stdout=stdout, stderr=stderr)
    return report


def test_a_healthy_probe() -> None:
    report = probed({"python": "3.11.7", "worker": "/srv/worker/__init__.py",
                     "tensorflow": "2.16.1", "busy_ports": {}})
    assert (report.python, report.worker, report.tensorflow, report.ports) == (
        "3.11.7", "ok", "2.16.1", "ok (1)")
    assert report.ok and report.warnings == []


@pytest.mark.parametrize(("answer", "problem"), [
    ({"python": "3.8.10", "worker": "x", "busy_ports": {}}, "python 3.8.10 < 3.10"),
    ({"python": "3.11.7", "worker_error": "ModuleNotFoundError: No module named 'worker'",
      "busy_ports": {}}, "worker not importable"),
    ({"python": "3.11.7", "worker": "x", "busy_ports": {"2222": "Address already in use"}},
     "ports in use: 2222 (Address already in use)"),
])
def test_probe_problems(answer: dict[str, object], problem: str) -> None:
    assert problem in probed(answer).problems


def test_no_tensorflow_is_only_a_warning() -> None:
    report = probed({"python": "3.11.7", "worker": "x", "busy_ports": {}})
    assert report.ok and report.tensorflow == "not installed"
    assert report.warnings == ["tensorflow not installed"]


def test_no_probe_answer_is_explained_from_the_exit_status() -> None:
    report = HostReport("node-a", "me@node-a:22")
    read_probe(report, work(), "/srv", status=127, stdout=b"",
                stderr=b"bash: line 1: exec: python3: not found\n")
    assert report.problems == ["python not found: python3"]


def test_tensorflow_must_be_the_same_wherever_it_is_installed() -> None:
    reports = [HostReport(name, "t") for name in ("a", "b", "c")]
    reports[0].tensorflow_version = reports[1].tensorflow_version = "2.16.1"
    reports[2].tensorflow_version = "2.17.0"
    compare_tensorflow(reports)
    assert reports[0].problems == ["tensorflow 2.16.1 here but 2.17.0 on c"]
    assert reports[2].problems == ["tensorflow 2.17.0 here but 2.16.1 on a, 2.16.1 on b"]
    same = [HostReport("a", "t"), HostReport("b", "t")]
    same[0].tensorflow_version = same[1].tensorflow_version = "2.16.1"
    compare_tensorflow(same)
    assert all(r.ok for r in same)


def test_local_checkpoint_dir_is_checked_at_its_nearest_existing_parent(tmp_path: Path) -> None:
    assert local_dir_problem(str(tmp_path / "not" / "yet")) is None
    (tmp_path / "file").write_text("")
    assert local_dir_problem(str(tmp_path / "file" / "sub")) == f"{tmp_path / 'file'} is not a directory"
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert local_dir_problem(str(locked / "x")) == f"{locked} is not writable"


def test_the_plain_table_is_aligned_with_details_under_it() -> None:
    good = HostReport("node-a", "me@a:22", connect="ok", python="3.11.7", worker="ok")
    bad = HostReport("b", "me@b:2222", connect="FAILED")
    bad.fail("unreachable: b:2222: refused", "cannot connect to b:2222 (check the port)")
    text = render_text(PreflightReport((good, bad), 1.25))
    lines = text.splitlines()
    assert lines[0].split() == ["HOST", "SSH", "TARGET", "CONNECT", "PYTHON", "WORKER",
                                "TENSORFLOW", "PORTS", "CHECKPOINT", "GPUS", "RESULT"]
    assert lines[1].index("me@a:22") == lines[2].index("me@b:2222") == lines[0].index("SSH")
    assert lines[2].endswith("FAIL: unreachable: b:2222: refused")
    assert "b: cannot connect to b:2222 (check the port)" in lines
    assert lines[-1] == "preflight: 1 of 2 host(s) not ready (b) in 1.2s"


def test_the_probe_is_valid_python_for_old_interpreters_too() -> None:
    compile(PROBE, "<probe>", "exec")
    assert "f\"" not in PROBE and "f'" not in PROBE  # no f-strings: Python 3.5 must parse it
