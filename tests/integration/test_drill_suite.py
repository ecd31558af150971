"""Drill files and coordinator loss, as a user runs them: the fake-trainer suite shipped in
cluster_specs/drills/ (random faults; repeated 3 times here, 5 as shipped) runs to the end with
every result matching the baseline; ``kill-coordinator`` leaves no task behind and the drill
resumes the run; a drill file with bad faults is refused with field paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.jobs import REPO, Job, running, wait_until_gone

DRILLS = REPO / "cluster_specs" / "drills"


def alive_since(pid: int, started: float) -> bool:
    """Whether the process ``pid`` that started at ``started`` still lives (not a newer one that
    was given its pid)."""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 2.0
    except psutil.Error:
        return False


def drill(tmp_path: Path, *args: str, timeout: float = 100) -> tuple[Job, int]:
    with running(["drill", *args, "--quiet"], tmp_path / "run", REPO) as job:
        code = job.wait(timeout)
        assert wait_until_gone(job.mark, 10) == [], "processes left behind"
    return job, code


REPEAT = 3


@pytest.mark.timeout(400)
def test_the_fake_trainer_suite_repeated_matches_the_baseline_every_time(tmp_path: Path) -> None:
    shipped = yaml.safe_load((DRILLS / "fake-trainer.yaml").read_text())
    assert shipped["repeat"] == 5
    suite = tmp_path / "suite.yaml"  # the shipped suite, fewer times (each repeat takes ~5 s)
    suite.write_text(yaml.safe_dump({**shipped, "repeat": REPEAT,
                                     "spec": str(DRILLS / shipped["spec"])}))
    job, code = drill(tmp_path, str(suite), timeout=380)
    assert code == 0, job.stdout + job.stderr
    run = tmp_path / "run"
    data: dict[str, Any] = json.loads((run / "drill.json").read_text())
    assert data["seed"] == 11 and data["passed"] is True
    baseline = data["baseline"]["result"]
    assert baseline.startswith("sha256=")
    scenarios = data["scenarios"]
    assert [(s["scenario"], s["repeat"]) for s in scenarios] == [
        (name, k) for name in ("term-random", "kill-random") for k in range(REPEAT)]
    for s in scenarios:
        assert Path(s["run_dir"]) == run / f"{s['scenario']}-{s['repeat'] + 1}"
        assert (s["outcome"], s["result"], s["result_check"]) == ("succeeded", baseline, "match")
        figures, = s["faults"]
        assert figures["detection_s"] > 0 and s["restarts"] >= 1
        assert figures["steps_lost"] is None or 0 <= figures["steps_lost"] <= 10
        if s["scenario"] == "term-random":
            assert figures["steps_lost"] in (0, None)  # None: resumed at the very end
    assert len({json.dumps(s["planned"]) for s in scenarios}) > 2  # each repeat draws anew
    table = (run / "drill.md").read_text()
    assert table.count("| match  |") == 2 * REPEAT
    assert f"kill-random #{REPEAT}" in job.stdout


@pytest.mark.timeout(180)
def test_a_lost_coordinator_leaves_no_task_and_the_drill_resumes_the_run(tmp_path: Path) -> None:
    job, code = drill(tmp_path, str(DRILLS / "fake-trainer-job.yaml"),
                      "--fault", "kill-coordinator:at-step=40", "--baseline", timeout=150)
    assert code == 0, job.stdout + job.stderr
    run = tmp_path / "run"
    scenario = json.loads((run / "drill.json").read_text())["scenarios"][0]
    loss = scenario["coordinator_loss"]
    assert loss["killed"] and loss["survivors"] == [] and loss["tasks_gone_s"] < 5
    first = [e for e in (json.loads(line) for line in (run / "events.jsonl").read_text()
                         .splitlines()) if e["event"] == "task_started" and e["attempt"] == 0]
    assert first and not [e["pid"] for e in first if alive_since(e["pid"], e["ts"])]
    assert loss["resume_exit_code"] == 0
    assert scenario["result_check"] == "match"
    figures, = scenario["faults"]
    assert figures["step"] >= 40 and figures["resume_step"] > 0  # from a checkpoint
    assert figures["steps_lost"] <= 10 + 50  # progress events come at most once a second
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["attempt"] for e in events if e["event"] == "attempt_started"] == [0, 1]
    assert events[-1]["event"] == "job_succeeded"


def test_a_drill_file_with_bad_faults_gets_field_paths_and_no_traceback(tmp_path: Path) -> None:
    suite = tmp_path / "bad.yaml"
    suite.write_text(yaml.safe_dump({
        "spec": str(DRILLS / "fake-trainer-job.yaml"), "repeat": 2,
        "scenarios": [{"name": "a", "faults": ["kill:worker:1:at-step=-1", "kill:nobody",
                                               "hurt:chief", "kill:host:elsewhere"]}]}))
    job, code = drill(tmp_path, str(suite))
    assert code == 2
    assert job.stderr.splitlines() == [
        f"{suite}: scenarios[0].faults[0].trigger: at-step needs a whole step number >= 1, not "
        "'-1' (in 'kill:worker:1:at-step=-1')",
        f"{suite}: scenarios[0].faults[1].target: unknown target 'nobody' (chief, worker:N, "
        "ps:N, evaluator:0, random, host:NAME, all) (in 'kill:nobody')",
        f"{suite}: scenarios[0].faults[2].action: unknown action 'hurt' (one of kill, term, stop, "
        "crash, partition, corrupt-checkpoint, kill-coordinator, lose-host, heal) "
        "(in 'hurt:chief')",
        f"{suite}: scenarios[0].faults[3].target: no host 'elsewhere' in the spec (hosts: "
        "localhost)"]
    assert not (tmp_path / "run").exists()
