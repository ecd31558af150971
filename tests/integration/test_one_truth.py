"""One run, every view, the same figures (issue 27): a drill that kills the chief of the fake trainer,
then the console, the live table (its board replayed over ``events.jsonl``), ``tfcluster status``,
``summary.json``, TensorBoard, and the drill's report and picture, each read back and compared with
the others and with the events: steps reached, steps lost, steps/s, attempt states, and the job's
last step."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from launcher.drill.plot import lives
from launcher.output.status import StatusBoard
from tests.support.jobs import REPO, fake_spec, read_events, run_status, running, write_spec
from tests.support.tensorboard_files import scalars

pytestmark = pytest.mark.timeout(90)

STEPS = 200
TASKS = ("chief:0", "worker:0", "worker:1")


def drilled(tmp_path: Path) -> tuple[str, Path]:
    """The console of a drill that kills the chief at step 67 (a checkpoint every 10 steps, none
    at the stop: steps are lost), and its run directory."""
    spec = write_spec(tmp_path, fake_spec(
        "truth", tasks=[{"type": "chief"}, {"type": "worker", "count": 2}],
        args=["--steps", str(STEPS), "--step-time", "0.02", "--checkpoint-every", "10"],
        checkpoint={"dir": str(tmp_path / "ckpt")}, restart={"max_restarts": 2, "backoff_s": 0.1}))
    run = tmp_path / "run"
    with running(["drill", str(spec), "--fault", "kill:chief:at-step=67"], run, REPO) as job:
        assert job.wait(60) == 0, job.stdout + job.stderr
        return job.stdout + job.stderr, run


def life_rate(events: list[dict[str, Any]], attempt: int, task: str) -> float:
    """Steps over the task's training time in the attempt (first report to last), by hand."""
    points = [(float(e.get("received_at") or e["ts"]), int(e["step"])) for e in events
              if e["event"] == "task_progress" and e["attempt"] == attempt and e["task"] == task]
    (t0, s0), (t1, s1) = points[0], points[-1]
    return (s1 - s0) / (t1 - t0)


def test_every_view_of_a_drilled_run_gives_the_same_figures(tmp_path: Path) -> None:
    console, run = drilled(tmp_path)
    events = read_events(run)
    summary = json.loads((run / "summary.json").read_text())
    drill = json.loads((run / "drill.json").read_text())["scenarios"][0]
    report = (run / "drill.md").read_text()
    status = run_status(run)

    # the events: what attempt 0 reached, where attempt 1 resumed, each task's last step
    def last(attempt: int, task: str) -> int:
        return max(e["step"] for e in events if e["event"] == "task_progress"
                   and e["attempt"] == attempt and e["task"] == task)
    reached = min(last(0, task) for task in TASKS)  # the step every task had reached
    resumed, = [e["resume_step"] for e in events if e["event"] == "attempt_started"
                and e["attempt"] == 1]
    assert [last(1, task) for task in TASKS] == [STEPS] * 3  # the final step reaches the events

    # the fault's step: the hurt task's, alike in the console, drill.json and drill.md
    fault, = drill["faults"]
    said = re.search(r"injected into chief:0 at step (\d+)", console)
    assert said is not None and int(said.group(1)) == fault["step"] <= last(0, "chief:0")
    assert f"→ chief:0 at step {fault['step']}," in report

    # steps reached and lost: the events, summary.json, status, drill.json, the drill's table
    lost = max(0, reached - resumed)  # nothing saved at the stop: steps after the checkpoint
    first, second = summary["attempts"]
    assert (first["reached_step"], first["steps_lost"], second["reached_step"]) == (
        reached, lost, STEPS)
    assert drill["faults"][0]["steps_lost"] == lost
    row = next(line for line in report.splitlines() if line.startswith("| drill "))
    assert [cell.strip() for cell in row.split("|")][6] == str(lost)
    lines = status.splitlines()
    assert lines[2].startswith("attempt 0: restarted,") and f"reached step {reached};" in lines[2]
    assert f"steps lost {lost}," in lines[2]
    assert lines[3].startswith("attempt 1: succeeded,") and f"reached step {STEPS}" in lines[3]

    # the live table's last frame (its board over the events) and the picture reach the last step
    board = StatusBoard()
    for event in events:
        board.apply(event)
    assert {row.task: row.step for row in board.ordered()} == dict.fromkeys(TASKS, STEPS)
    assert [lives(events, task)[-1][-1][1] for task in TASKS] == [STEPS] * 3

    # steps/s: one figure per task in status, summary.json, the live table and the events
    health = summary["health"]["tasks"]
    for task in TASKS:
        shown = re.search(rf"^  {re.escape(task)} +done +step {STEPS} +([\d.]+) steps/s", status,
                          re.MULTILINE)
        assert shown is not None, status
        assert shown.group(1) == f"{health[task]['steps_per_s']:.2f}" == \
            f"{board.rows[task].rate:.2f}"
        # by hand, from the events' own (rounded) times: the same to the last digit shown
        assert float(shown.group(1)) == pytest.approx(life_rate(events, 1, task), abs=0.011)
        assert health[task]["step"] == STEPS

    # TensorBoard's job/steps_per_s ends at the job's last step, on its slowest task's rate
    points = scalars(run / "tensorboard" / "job", "steps_per_s")
    assert points[-1][0] == STEPS
    assert points[-1][1] == pytest.approx(min(h["steps_per_s"] for h in health.values()),
                                          abs=1e-3)
