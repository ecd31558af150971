"""``tfcluster drill`` on the fake trainer, as a user runs it: every action, target and trigger,
each drill's report files and figures (detection > 0, steps lost <= the checkpoint interval, none
for ``term``), its result against a baseline, and the exit code when a drill proves nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.jobs import REPO, Job, running, wait_until_gone
from worker.report_queue import FLUSH_INTERVAL_S

pytestmark = pytest.mark.timeout(120)

JOB_SPEC = REPO / "cluster_specs" / "drills" / "fake-trainer-job.yaml"
CHECKPOINT_EVERY = 10
STEP_TIME_S = 0.02  # as in the spec
HANG_TIMEOUT_S = 2.0


def drill(tmp_path: Path, *args: str, run: str = "run") -> tuple[Job, int]:
    with running(["drill", *args], tmp_path / run, REPO) as job:
        code = job.wait(100)
        assert wait_until_gone(job.mark, 10) == [], "processes left behind"
    return job, code


def report(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "drill.json").read_text())
    assert (run_dir / "drill.md").read_text().startswith("# Drill report")
    assert (run_dir / "drill.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return data


# Session scope: built once per xdist worker, even where other modules' tests run between
# this module's (a module fixture is built again after them).
@pytest.fixture(scope="session")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run without faults whose result every drill here must end with."""
    tmp_path = tmp_path_factory.mktemp("baseline")
    with running(["run", str(JOB_SPEC), "--quiet",
                  "--checkpoint-dir", str(tmp_path / "ckpt")], tmp_path / "run", REPO) as job:
        assert job.wait(60) == 0, job.stderr
    return tmp_path / "run"


def one_fault(tmp_path: Path, baseline: Path, fault: str, *more: str,
              spec: Path = JOB_SPEC) -> dict[str, Any]:
    """Drill ``fault``; the scenario's record, after checking it passed."""
    job, code = drill(tmp_path, str(spec), "--fault", fault, "--baseline-from", str(baseline),
                      "--quiet", *more)
    assert code == 0, job.stdout + job.stderr
    scenario: dict[str, Any] = report(tmp_path / "run")["scenarios"][0]
    assert scenario["passed"] and scenario["outcome"] == "succeeded", scenario
    assert scenario["result_check"] == "match"
    assert "| scenario" in job.stdout and f"picture: {tmp_path / 'run' / 'drill.png'}" in job.stdout
    return scenario


def sane(figures: dict[str, Any]) -> None:
    assert figures["detection_s"] > 0
    assert 0 < figures["teardown_s"] < 10
    assert figures["recovery_s"] > figures["detection_s"]
    assert 0 <= figures["steps_lost"] <= CHECKPOINT_EVERY


@pytest.mark.parametrize(("fault", "detected_as"), [
    ("kill:worker:1:at-step=15", "signalled (worker:1)"),
    ("crash:chief:at-step=15", "exited (chief:0)"),
    ("stop:worker:0:at-step=15", "hung (worker:0)"),
])
def test_a_fault_that_kills_or_hangs_a_task(tmp_path: Path, baseline: Path, fault: str,
                                             detected_as: str) -> None:
    scenario = one_fault(tmp_path, baseline, fault)
    figures, = scenario["faults"]
    sane(figures)
    assert figures["detected_as"] == detected_as
    # the step every task had reached when the fault fired, on the first report at or past 15:
    # reports go out batched (at most every FLUSH_INTERVAL_S), so up to that many steps later
    assert 0 < figures["step"] <= 15 + math.ceil(FLUSH_INTERVAL_S / STEP_TIME_S) + 1
    assert scenario["restarts"] == 1
    if fault.startswith("stop"):
        assert figures["detection_s"] >= HANG_TIMEOUT_S - 0.5  # counted from the last step
    if fault.startswith("crash"):
        log = (tmp_path / "run" / "attempt-0" / "chief-0.log").read_text()
        assert "InjectedCrash: tfcluster drill: crash injected (SIGPWR)" in log


def test_a_preemption_notice_loses_no_step(tmp_path: Path, baseline: Path) -> None:
    figures, = one_fault(tmp_path, baseline, "term:chief:at-step=15")["faults"]
    assert figures["detected_as"] == "preempted (chief:0)"
    assert figures["steps_lost"] == 0
    assert figures["resume_step"] >= figures["step"]


def test_a_corrupted_checkpoint_is_skipped_on_restart(tmp_path: Path, baseline: Path) -> None:
    figures, = one_fault(tmp_path, baseline, "corrupt-checkpoint:latest:at-step=25")["faults"]
    corrupted = int(figures["detail"].rsplit("-", 1)[1])
    # the chief's latest when it died, killed once a task reached step 25: ckpt-20 mostly (the
    # fake trainer's tasks do not step together: ckpt-10 or ckpt-30 under load); truncated only
    # then, so the chief saved none after it that the restart could resume from instead
    assert corrupted >= CHECKPOINT_EVERY
    assert figures["resume_step"] == corrupted - CHECKPOINT_EVERY  # the previous complete one
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert f"ckpt-{corrupted}" in events and "empty ckpt-" in events  # discovery said why


@pytest.mark.parametrize(("fault", "hurt"), [
    ("kill:all:at-step=15", ["chief:0", "worker:0", "worker:1"]),
    ("kill:host:localhost:after=0.5", ["chief:0", "worker:0", "worker:1"]),
    ("kill:random:random", None),
])
def test_targets_and_triggers(tmp_path: Path, baseline: Path, fault: str,
                              hurt: list[str] | None) -> None:
    scenario = one_fault(tmp_path, baseline, fault, "--seed", "4", "--random-horizon", "40")
    figures, = scenario["faults"]
    planned, = scenario["planned"]
    assert figures["tasks"] == planned["tasks"]
    if hurt is not None:
        assert figures["tasks"] == hurt
    else:  # the seed chose one task and a step, and the same again for the same seed
        assert len(figures["tasks"]) == 1 and planned["trigger"].startswith("at-step=")
        (tmp_path / "again").mkdir()
        again = one_fault(tmp_path / "again", baseline, fault, "--seed", "4",
                          "--random-horizon", "40")
        assert again["planned"] == scenario["planned"]
    sane(figures)


def test_an_evaluator_target(tmp_path: Path) -> None:
    spec = yaml.safe_load(JOB_SPEC.read_text())
    spec["tasks"].append({"type": "evaluator", "host": "localhost"})
    spec["workdir"] = str(REPO)  # the copy is elsewhere: its relative paths would start there
    spec["checkpoint"] = {"dir": str(tmp_path / "ckpt")}
    path = tmp_path / "ev.yaml"
    path.write_text(yaml.safe_dump(spec))
    job, code = drill(tmp_path, str(path), "--fault", "kill:evaluator:0:at-step=10", "--quiet")
    assert code == 0, job.stdout + job.stderr
    figures, = report(tmp_path / "run")["scenarios"][0]["faults"]
    assert figures["tasks"] == ["evaluator:0"] and figures["detection_s"] > 0


NO_STEPS = """\
import os, time
time.sleep(float(os.environ.get("WORK_S", "2")))
print("tfcluster-result: done", flush=True)
"""


def test_after_works_for_a_script_that_never_reports_steps(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(NO_STEPS)
    spec = {"name": "plain", "entrypoint": {"script": str(script)},
            "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
            "restart": {"max_restarts": 2, "backoff_s": 0.1}, "health": {"grace_period_s": 2}}
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(spec))
    job, code = drill(tmp_path, str(path), "--fault", "kill:worker:1:after=0.5", "--quiet")
    assert code == 0, job.stdout + job.stderr
    scenario = report(tmp_path / "run")["scenarios"][0]
    figures, = scenario["faults"]
    assert figures["step"] == 0 and figures["detection_s"] > 0
    assert scenario["restarts"] == 1 and scenario["result"] == "done"


def test_a_fault_never_injected_fails_the_drill(tmp_path: Path) -> None:
    job, code = drill(tmp_path, str(JOB_SPEC), "--fault", "kill:worker:1:at-step=1000",
                      "--quiet")
    assert code == 1
    assert ("FAILED drill: kill:worker:1:at-step=1000 was never injected (its trigger "
            "at-step=1000 never came): a drill that hurt nothing proved nothing") in job.stdout
    assert report(tmp_path / "run")["passed"] is False


def test_a_different_result_fails_the_drill_naming_the_scenario(tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "attempt-0").mkdir(parents=True)
    (other / "events.jsonl").write_text("{}\n")
    (other / "attempt-0" / "chief-0.log").write_text("tfcluster-result: sha256=something-else\n")
    job, code = drill(tmp_path, str(JOB_SPEC), "--fault", "kill:worker:0:at-step=5",
                      "--baseline-from", str(other), "--quiet")
    assert code == 1
    assert "FAILED drill: result DIFFERS: sha256=" in job.stdout
    assert "(baseline sha256=something-else)" in job.stdout


@pytest.mark.parametrize(("args", "lines"), [
    (["--fault", "kill:worker:1:at-step=x", "--fault", "zap:chief"],
     ["tfcluster drill: --fault[0].trigger: at-step needs a whole step number >= 1, not 'x' "
      "(in 'kill:worker:1:at-step=x')",
      "tfcluster drill: --fault[1].action: unknown action 'zap' (one of kill, term, stop, crash, "
      "partition, corrupt-checkpoint, kill-coordinator, lose-host, heal) (in 'zap:chief')"]),
    (["--fault", "kill:worker:7"],
     ["tfcluster drill: --fault[0].target: no task 'worker:7' in the spec (tasks: chief:0, "
      "worker:0, worker:1)"]),
    (["--fault", "kill:worker:1:after=1", "--fault", "heal:h2:after=10"],
     ["tfcluster drill: --fault[1].target: heal:h2 gives back a host that lose-host:h2 took "
      "away, and no fault here is lose-host:h2"]),
])
def test_bad_faults_on_the_command_line(tmp_path: Path, args: list[str],
                                        lines: list[str]) -> None:
    job, code = drill(tmp_path, str(JOB_SPEC), *args)
    assert code == 2
    assert job.stderr.splitlines() == lines
    assert "Traceback" not in job.stderr
    assert not (tmp_path / "run").exists()
