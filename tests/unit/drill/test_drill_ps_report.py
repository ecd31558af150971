"""A drill on a parameter_server job, judged and reported: the job's final step against the
baseline's (from ``summary.json``), the report's task-restart columns and lines, the picture's
lines per process, and the exit code of a drill whose job restarted the wrong tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.drill.coordinator_loss import ChildRunner
from launcher.drill.drive import DrillRequest, run_drill
from launcher.drill.faults import parse_faults
from launcher.drill.figures import run_figures
from launcher.drill.injector import resolve
from launcher.drill.plot import last_step, lives, restarted_at
from launcher.drill.report import table, write
from launcher.drill.session import Plan, ScenarioResult, judge
from launcher.drill.suite import Scenario
from launcher.drill.verdict import Baseline, compare, final_step
from launcher.job.hooks import AttemptHooks
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.support.ps_events import CHIEF, PIDS, Event, ev, ps_kill, worker_kill

TASKS = {task: "h" for task in PIDS}


def summary(tasks: dict[str, Any]) -> dict[str, Any]:
    return {"exit_code": 0, "health": {"tasks": {name: {"step": step, "rss_bytes": 1}
                                                 for name, step in tasks.items()}}}


@pytest.mark.parametrize(("content", "step"), [
    (summary({CHIEF: 60, "worker:0": None, "ps:0": None}), 60),  # the chief's
    (summary({"worker:0": 40, "worker:1": 41}), 40),                # no chief: worker 0's
    (summary({CHIEF: None, "worker:0": None}), None),              # it reported no step
    (summary({CHIEF: True}), None),
    (summary({CHIEF: 60, "nobody": 3}), None),
    ({"exit_code": 0}, None),                                      # no health section
    ("{\"health\": {\"tas", None),                                 # torn
    (None, None),                                                  # no summary.json
])
def test_the_final_step_is_the_chiefs_last_one(tmp_path: Path, content: Any,
                                               step: int | None) -> None:
    if content is not None:
        text = content if isinstance(content, str) else json.dumps(content)
        (tmp_path / "summary.json").write_text(text)
    assert final_step(tmp_path) == step


def scenario(events: list[Event], fault: str, *, steps: int | None = 60,
             expected: int | None = 60, sizes: tuple[int, ...] = ()) -> ScenarioResult:
    faults = parse_faults([fault], "f", "t")
    outcome = ScenarioResult(fault.split(":")[1], 0, Path(f"/runs/{fault}"), tuple(faults),
                             tuple(resolve(faults, TASKS, 0)), 0, run_figures(events),
                             compare("r", "r", sizes, steps=steps, expected_steps=expected),
                             restarts_tasks=True)
    judge(outcome)
    return outcome


SHORT = ["the job ended at step 52, the baseline at step 60: it did not complete all its steps"]


@pytest.mark.parametrize(("steps", "expected", "sizes", "problems"), [
    (60, 60, (), []),
    (52, 60, (), SHORT),
    (61, 60, (), ["the job ended at step 61, the baseline at step 60: it did not complete all "
                  "its steps"]),
    (None, 60, (), []),   # the job's final step unknown: not compared
    (52, None, (), []),   # the baseline's unknown (or no baseline)
    (52, 60, (3, 2), []),  # it ran at another size: not compared, as the result
    (52, 60, (3, 3), SHORT),
])
def test_the_job_must_end_at_the_baselines_step(steps: int | None, expected: int | None,
                                                sizes: tuple[int, ...],
                                                problems: list[str]) -> None:
    outcome = scenario(worker_kill(), "kill:worker:1:after=2", steps=steps, expected=expected,
                       sizes=sizes)
    assert outcome.problems == problems


def test_a_failed_job_is_not_also_short() -> None:
    events = [*worker_kill()[:-1], ev(6.2, "job_failed", job="ps")]
    outcome = scenario(events, "kill:worker:1:after=2", steps=52)
    assert outcome.problems == ["the job failed (exit code 0)"]


def test_the_table_has_job_and_task_restarts() -> None:
    results = [scenario(worker_kill(), "kill:worker:1:after=2"),
               scenario(ps_kill(), "kill:ps:0:after=2")]
    assert table(results) == [
        "| scenario | outcome   | detection | teardown | recovery | steps lost | job restarts | "
        "task restarts | restarted    | result |",
        "|----------|-----------|-----------|----------|----------|------------|--------------|-"
        "--------------|--------------|--------|",
        "| worker   | succeeded | 4 ms      | -        | 500 ms   | 0          | 0            | "
        "1             | worker:1     | match  |",
        "| ps       | succeeded | 2 ms      | 8 ms     | 700 ms   | 0          | 0            | "
        "1             | ps:0+chief:0 | match  |",
    ]


def test_the_files_say_what_each_fault_restarted(tmp_path: Path) -> None:
    write(tmp_path, [scenario(worker_kill(), "kill:worker:1:after=2"),
                     scenario(ps_kill(), "kill:ps:0:after=2")],
          seed=0, baseline=Baseline("r", 60), baseline_from=None, picture=None)
    text = (tmp_path / "drill.md").read_text()
    assert "seed 0; baseline result: r (at step 60)" in text
    assert "`kill:worker:1:after=2` → worker:1 at step 19, detected as signalled (worker:1), " \
           "restarted worker:1 in attempt 0; the chief trained on\n" in text
    assert "`kill:ps:0:after=2` → ps:0 at step 20, detected as signalled (ps:0), restarted ps:0 " \
           "and chief:0 in attempt 0; the chief was stopped in 8 ms and resumed at step 20\n" in text
    worker, ps = json.loads((tmp_path / "drill.json").read_text())["scenarios"]
    assert (worker["restarts"], worker["task_restarts"], worker["steps"]) == (0, 1, 60)
    assert ps["faults"][0]["restarted"] == ["ps:0", CHIEF]


def test_the_picture_breaks_the_chiefs_line_where_it_was_started_again() -> None:
    events = ps_kill()
    assert lives(events, CHIEF, [(2.0, 20)]) == [
        [(0.5, 1), (1.5, 10), (2.0, 20)],  # the fault's point ends its first life
        [(2.7, 21), (3.7, 31), (5.5, 55)]]
    assert lives(worker_kill(), CHIEF, [(2.0, 19)])[0][:4] == [(0.5, 1), (1.5, 10), (2.0, 19),
                                                               (2.2, 21)]
    assert lives(events, CHIEF, [(2.0, 5)])[0][-1] == (1.5, 10)  # never a step backwards
    assert restarted_at(events) == [(2.5, "ps:0+chief:0")]
    assert last_step(events) == (5.5, 55)  # the job's last step, where it was reported


def ps_spec(tmp_path: Path) -> ClusterSpec:
    return spec_from_dict({
        "name": "ps", "entrypoint": {"script": "train.py"},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}, {"type": "ps"}],
        "checkpoint": {"dir": str(tmp_path / "ckpt")}})


@pytest.mark.parametrize(("events", "code", "failed"), [
    (worker_kill(), 0, None),
    (worker_kill(chief_again=True), 1, "FAILED drill: kill:worker:1:after=2: the chief was started "
     "again (pid 11 → 12): a worker's failure must leave it training"),
])
def test_a_drill_whose_job_restarted_the_wrong_tasks_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], events: list[Event], code: int,
        failed: str | None) -> None:
    def run_job(spec: ClusterSpec, run_dir: Path, hooks: AttemptHooks | None) -> int:
        """The job as its events.jsonl and summary.json tell it."""
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (run_dir / "summary.json").write_text(json.dumps(summary({CHIEF: 60})))
        return 0

    spec = ps_spec(tmp_path)
    faults = tuple(parse_faults(["kill:worker:1:after=2"], "--fault", "t"))
    request = DrillRequest(Plan(spec, tmp_path / "ps.yaml", 0, 100), (Scenario("drill", faults),),
                           1, tmp_path / "drill", baseline=False, baseline_from=None, single=True)
    assert run_drill(request, run_job, ChildRunner(tmp_path)) == code
    out = capsys.readouterr().out
    assert "| drill    | succeeded" in out
    assert (failed in out.splitlines()) if failed else "FAILED" not in out
