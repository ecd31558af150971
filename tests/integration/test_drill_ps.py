"""``tfcluster drill`` on a parameter_server job, as a user runs it, without TensorFlow: the chief
is the fake trainer (its result chained over every step, checkpointed), the workers and the ps
stand-ins for TF servers listening on their TF_CONFIG ports (``tests/support/fake_server.py``).

One drill file, one baseline and two scenarios: a worker killed is restarted alone while the chief
trains on (same pid); a ps killed is restarted with the chief, which resumes from a checkpoint;
both jobs end at the baseline's step with its result, and the report says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.jobs import REPO, fake_spec, read_events, running, wait_until_gone, write_spec

pytestmark = pytest.mark.timeout(60)

FAKE_SERVER = str(REPO / "tests" / "support" / "fake_server.py")
STEPS = 60
CHECKPOINT_EVERY = 10
#: The chief's step the faults come at: past its first checkpoint.
FAULT_STEP = 15
CHIEF_ARGS = ["--steps", str(STEPS), "--step-time", "0.05",
              "--checkpoint-every", str(CHECKPOINT_EVERY), "--result"]


def drill_file(tmp_path: Path) -> Path:
    server = {"script": FAKE_SERVER, "args": []}
    spec = write_spec(tmp_path, fake_spec(
        "psdrill", args=CHIEF_ARGS,
        tasks=[{"type": "chief"}, {"type": "worker", "count": 2, "entrypoint": server},
               {"type": "ps", "entrypoint": server}],
        checkpoint={"dir": str(tmp_path / "ckpt")},
        restart={"max_restarts": 2, "max_task_restarts": 2, "backoff_s": 0.2}))
    suite = tmp_path / "drill.yaml"
    suite.write_text(yaml.safe_dump({
        "spec": spec.name, "baseline": True,
        # at a step of the chief, never a time: under load its first checkpoint came more than a
        # second after its start, and a ps killed before it proves nothing about resuming
        "scenarios": [{"name": "kill-worker", "faults": [f"kill:worker:1:at-step={FAULT_STEP}"]},
                      {"name": "kill-ps", "faults": [f"kill:ps:0:at-step={FAULT_STEP}"]}]}))
    return suite


def of(events: list[dict[str, Any]], kind: str, task: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind and e.get("task") == task]


def test_a_worker_and_a_ps_killed_restart_what_they_should(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with running(["drill", str(drill_file(tmp_path)), "--quiet"], run, tmp_path) as job:
        code = job.wait(50)
        assert wait_until_gone(job.mark, 10) == [], "processes left behind"
    assert code == 0, job.stdout + job.stderr
    data = json.loads((run / "drill.json").read_text())
    assert data["passed"] and data["baseline"]["steps"] == STEPS
    worker, ps = data["scenarios"]
    for scenario in (worker, ps):
        assert (scenario["outcome"], scenario["result_check"], scenario["problems"]) == (
            "succeeded", "match", [])
        assert (scenario["steps"], scenario["expected_steps"]) == (STEPS, STEPS)
        assert (scenario["restarts"], scenario["task_restarts"]) == (0, 1)

    figures, = worker["faults"]
    assert figures["restarted"] == ["worker:1"] and figures["steps_lost"] == 0
    assert 0 < figures["detection_s"] < figures["recovery_s"]
    events = read_events(Path(worker["run_dir"]))
    assert len(of(events, "task_started", "chief:0")) == 1  # the chief's pid never changed
    restarted, = of(events, "task_restarted", "worker:1")
    assert restarted["together"] == [] and restarted["resume_step"] is None

    figures, = ps["faults"]
    assert figures["restarted"] == ["ps:0", "chief:0"]
    assert figures["resume_step"] > 0 and 0 <= figures["steps_lost"] <= CHECKPOINT_EVERY
    assert figures["teardown_s"] > 0 and figures["detection_s"] < figures["recovery_s"]
    events = read_events(Path(ps["run_dir"]))
    restarted, = of(events, "task_restarted", "ps:0")
    assert restarted["together"] == ["chief:0"] and restarted["resume_step"] > 0
    stopped, = (e for e in of(events, "task_exited", "chief:0") if e["stopped"])
    assert stopped["ts"] > restarted["ts"]
    assert len(of(events, "task_started", "chief:0")) == 2
    assert [e["event"] for e in events][-1] == "job_succeeded"

    table = (run / "drill.md").read_text()
    assert "| job restarts | task restarts | restarted    | result |" in table
    assert "| 0            | 1             | worker:1     | match  |" in table
    assert "| 0            | 1             | ps:0+chief:0 | match  |" in table
    assert "restarted worker:1 in attempt 0; the chief trained on" in table
    assert "| kill-ps " in job.stdout
