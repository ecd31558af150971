"""Metrics of a restarted job: every report in metrics.jsonl, and TensorBoard files that read back
(with TensorBoard's own EventAccumulator) as one series per task spanning both attempts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.jobs import REPO, fake_spec, running, write_spec
from tests.support.tensorboard_files import scalars, tags, timed_scalars

pytestmark = pytest.mark.timeout(120)

STEPS = 100


def test_a_restarted_job_is_one_continuous_curve_per_task(tmp_path: Path) -> None:
    args = ["--steps", str(STEPS), "--step-time", "0.1", "--checkpoint-every", "10",
            "--fail-task", "worker:1", "--fail-at-step", "55", "--fail-mode", "signal:KILL",
            "--fail-attempts", "0"]
    spec = fake_spec("curves", args=args, checkpoint={"dir": str(tmp_path / "ckpt")},
                     tasks=[{"type": "chief"}, {"type": "worker", "count": 2}],
                     restart={"max_restarts": 1, "backoff_s": 0.1})
    run_dir = tmp_path / "run"
    with running(["run", str(write_spec(tmp_path, spec))], run_dir, REPO) as job:
        assert job.wait(90) == 0, job.stderr
    events = job.events()
    resumed = next(e for e in events if e["event"] == "attempt_started" and e["attempt"] == 1)
    # the chief's checkpoint at step 50, or a later one when worker:1 (the last to get one of
    # the host's start-up slots) started late enough, on a loaded machine, for the chief to save
    # step 60 before worker:1 reached step 55
    resume = resumed["resume_step"]
    assert resume >= 50 and resume % 10 == 0
    second_start = resumed["ts"]

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for task in ("chief:0", "worker:0", "worker:1"):
        mine = [(r["attempt"], r["step"]) for r in lines if r["task"] == task]
        # both attempts' reports are kept, each attempt's in order (under load the agent may send
        # only the newest of two reports that queued up: worker.agent.outbox), the first of attempt 1
        # at the resume point and the last at the end
        for attempt in (0, 1):
            steps = [s for a, s in mine if a == attempt]
            assert steps == sorted(set(steps)), (task, attempt)
        assert next(s for a, s in mine if a == 0) == 1
        assert next(s for a, s in mine if a == 1) == resume + 1 and mine[-1] == (1, STEPS)

    board = run_dir / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["chief-0", "job", "worker-0", "worker-1"]
    for run in ("chief-0", "worker-0", "worker-1"):
        assert tags(board / run) == ["loss"]
        points = timed_scalars(board / run, "loss")
        steps = [step for _, step, _ in points]
        # one series: attempt 0's points up to the resume step, then attempt 1's; no step twice
        assert steps == sorted(set(steps)) and steps[0] == 1 and steps[-1] == STEPS, run
        assert all((wall >= second_start) == (step > resume) for wall, step, _ in points), run
        assert points[-1][2] == pytest.approx(1.0 / STEPS)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["reports"] == len(lines)
    dropped = dict(summary["metrics"]["dropped"])
    dropped.pop("replaced")  # reports the agent replaced by newer ones under load, counted
    assert dropped == {"queue_full": 0, "size_cap": 0, "write_error": 0, "bad_value": 0,
                       "metrics_over_size": 0}
    job_rate = scalars(board / "job", "steps_per_s")
    assert job_rate and all(rate > 0 for _, rate in job_rate)
