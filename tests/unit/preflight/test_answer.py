"""The pure parts of pre-flight: reading a probe's answer, comparing hosts, rendering the report."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from launcher.backends.local.probe import explain_probe_exit, local_dir_problem
from launcher.plan.planner import HostPlan, TaskPlan
from launcher.preflight.answer import parse_answer, read_answer
from launcher.preflight.probe import HostWork, Marker
from launcher.preflight.probe_code import PROBE
from launcher.preflight.report import HostReport, PreflightReport, compare_tensorflow
from launcher.preflight.runner import ProbeOutput
from launcher.preflight.view import render_text, report_before_run, report_lines
from worker.wire.tfconfig import TaskId, TFConfig
from worker.wire.version import TFCLUSTER_VERSION


def host_plan() -> HostPlan:
    task = TaskPlan(task=TaskId("worker", 0), host="node-a", port=2222,
                    tf_config=TFConfig(cluster={"worker": ("node-a:1",)},
                                       task=TaskId("worker", 0)),
                    argv=("python3",), env={}, cwd="/srv")
    return HostPlan(name="node-a", local=False, address="node-a", python="python3",
                    tasks=(task,))


def work(ports: tuple[int, ...] = (2222,), marker: Marker | None = None) -> HostWork:
    return HostWork(host_plan(), ports, None, marker)


def probed(answer: dict[str, object], marker: Marker | None = None) -> HostReport:
    report = HostReport("node-a", "me@node-a:22")
    stdout = b"motd noise from a .bashrc\nTFCLUSTER-PREFLIGHT " + json.dumps(answer).encode()
    found = parse_answer(stdout)
    assert found is not None
    read_answer(report, work(marker=marker), found, "/srv")
    return report


HEALTHY: dict[str, object] = {"python": "3.11.7", "worker": "/srv/worker/__init__.py",
                              "tfcluster": TFCLUSTER_VERSION, "tensorflow": "2.16.1",
                              "busy_ports": {}}


def test_a_healthy_probe() -> None:
    report = probed(HEALTHY)
    assert (report.python, report.worker, report.tfcluster, report.tensorflow, report.ports) == (
        "3.11.7", "ok", TFCLUSTER_VERSION, "2.16.1", "ok (1)")
    assert report.ok and report.warnings == []


@pytest.mark.parametrize(("answer", "problem"), [
    ({"python": "3.8.10", "busy_ports": {}}, "python 3.8.10 < 3.10"),
    ({"worker_error": "ModuleNotFoundError: No module named 'worker'"}, "worker not importable"),
    ({"busy_ports": {"2222": "Address already in use"}},
     "port 2222 of worker:0 in use: Address already in use"),
])
def test_probe_problems(answer: dict[str, object], problem: str) -> None:
    assert problem in probed({**HEALTHY, **answer}).problems


def test_no_tensorflow_is_a_problem_naming_the_interpreter() -> None:
    report = probed({k: v for k, v in HEALTHY.items() if k != "tensorflow"})
    assert not report.ok and report.tensorflow == "MISSING"
    assert report.problems == ["tensorflow not installed for python3"]


def test_tensorflow_found_without_metadata_is_ready() -> None:
    report = probed({**HEALTHY, "tensorflow": "installed"})
    assert report.ok and report.tensorflow == "installed"


def test_a_missing_script_or_module_is_named_with_its_tasks() -> None:
    report = probed({**HEALTHY, "missing_entrypoints": [
        {"script": "train.py", "tasks": ["chief:0", "worker:0"]},
        {"module": "pkg.train", "tasks": ["worker:1"]}]})
    assert report.problems == [
        "entrypoint.script train.py: no such file in /srv (chief:0, worker:0)",
        "entrypoint.module pkg.train: python3 in /srv cannot find it (worker:1)"]


def test_another_tfcluster_version_names_both_and_the_fix() -> None:
    report = probed({**HEALTHY, "tfcluster": "0.0.1"})
    assert report.tfcluster == "0.0.1 (DIFFERS)"
    assert report.problems == [f"tfcluster 0.0.1 here but {TFCLUSTER_VERSION} on the coordinator"]
    assert report.details == [f"python3 in /srv has tfcluster 0.0.1, the coordinator runs "
                              f"tfcluster {TFCLUSTER_VERSION}: install tfcluster "
                              f"{TFCLUSTER_VERSION} there or set 'workdir' to a checkout of "
                              "that version"]


def test_a_worker_module_that_is_not_tfclusters_is_refused() -> None:
    report = probed({**{k: v for k, v in HEALTHY.items() if k != "tfcluster"},
                     "worker": "/srv/worker.py"})
    assert report.worker == "NOT TFCLUSTER'S"
    assert report.problems == ["worker is not tfcluster's"]
    assert "imports 'worker' from /srv/worker.py" in report.details[0]


def test_the_shared_checkpoint_dir_marker() -> None:
    writes = Marker("write", "/ckpt", "t")
    assert probed({**HEALTHY, "marker": "ok"}, writes).checkpoint == "ok"
    missing = probed({**HEALTHY, "marker": "NOT SHARED",
                      "marker_error": "does not see the marker the chief wrote in the checkpoint dir"},
                     Marker("read", "/ckpt", "t"))
    assert missing.checkpoint == "NOT SHARED"
    assert missing.problems == ["does not see the marker the chief wrote in the checkpoint dir"]


def test_no_probe_answer_is_explained_from_the_exit_status() -> None:
    assert parse_answer(b"") is None
    error = explain_probe_exit(host_plan(), ProbeOutput(
        127, b"", b"bash: line 1: exec: python3: not found\n", "/srv"))
    assert error.summary == "python not found: python3"


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
                                "TFCLUSTER", "TENSORFLOW", "PORTS", "CHECKPOINT", "GPUS",
                                "RESULT"]
    assert lines[1].index("me@a:22") == lines[2].index("me@b:2222") == lines[0].index("SSH")
    assert lines[2].endswith("FAIL: unreachable: b:2222: refused")
    assert "b: cannot connect to b:2222 (check the port)" in lines
    assert lines[-1] == "preflight: 1 of 2 host(s) not ready (b) in 1.2s"


def test_one_line_per_host_and_the_gate_in_that_layout() -> None:
    good = HostReport("n1", "node n1", python="3.11.7", tfcluster="0.1.0")
    bad = HostReport("n2", "node n2", python="3.11.7", tfcluster="0.1.0")
    bad.fail("ports in use: 24601 (Address already in use)")
    report = PreflightReport((good, bad), 1.0, layout="lines")
    assert report_lines(report) == [
        "n1: python 3.11.7, tfcluster 0.1.0: ok",
        "n2: python 3.11.7, tfcluster 0.1.0: ports in use: 24601 (Address already in use)"]
    out = io.StringIO()
    assert not report_before_run(report, "digits", out)
    assert out.getvalue().splitlines() == [
        "tfcluster: job digits not started: pre-flight found problems on its hosts:",
        *(f"  {line}" for line in report_lines(report))]


def test_the_probe_is_valid_python_for_old_interpreters_too() -> None:
    compile(PROBE, "<probe>", "exec")
    assert "f\"" not in PROBE and "f'" not in PROBE  # no f-strings: Python 3.5 must parse it
