"""A drill's verdict: figures per fault from scripted events, the result line from task logs, and
the reasons a scenario fails (a fault never injected, a term that lost steps, another result)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.drill.faults import parse_faults
from launcher.drill.figures import run_figures
from launcher.drill.injector import resolve
from launcher.drill.session import ScenarioResult, judge
from launcher.drill.verdict import Check, compare, final_result

Event = dict[str, Any]
TASKS = {"chief:0": "localhost", "worker:1": "localhost"}


def ev(ts: float, event: str, **fields: Any) -> Event:
    return {"ts": ts, "event": event, **fields}


def two_faults() -> list[Event]:
    """worker:1 killed at step 40 (attempt 0, resumed at 30), chief TERMed at step 70 (attempt 1,
    resumed at 70)."""
    return [
        ev(0.0, "attempt_started", attempt=0, resume_step=None),
        ev(1.0, "task_progress", task="chief:0", step=1, attempt=0, first=True),
        ev(5.0, "fault_injected", attempt=0, fault="kill:worker:1:at-step=40", action="kill",
           task="worker:1", tasks=["worker:1"], step=40),
        ev(5.2, "task_failed", task="worker:1", attempt=0, kind="signalled", observed_at=5.01),
        ev(5.3, "task_progress", task="chief:0", step=40, attempt=0, first=False),  # its last
        ev(6.0, "job_restarting", attempt=1),
        ev(6.1, "attempt_started", attempt=1, resume_step=30),
        ev(7.0, "task_progress", task="chief:0", step=31, attempt=1, first=True),
        ev(9.0, "fault_injected", attempt=1, fault="term:chief:0:at-step=70", action="term",
           task="chief:0", tasks=["chief:0"], step=70),
        ev(9.4, "task_progress", task="chief:0", step=70, attempt=1, first=False),  # its last
        ev(9.5, "task_failed", task="chief:0", attempt=1, kind="preempted", observed_at=9.5),
        ev(10.0, "job_restarting", attempt=2),
        ev(10.1, "attempt_started", attempt=2, resume_step=70),
        ev(11.0, "task_progress", task="chief:0", step=71, attempt=2, first=True),
        ev(12.0, "job_succeeded"),
    ]


def test_figures_per_fault() -> None:
    figures = run_figures(two_faults())
    kill, term = figures.faults
    assert kill.detection_s == pytest.approx(0.01)
    assert kill.teardown_s == pytest.approx(0.99)
    assert kill.recovery_s == pytest.approx(2.0)
    assert (kill.resume_step, kill.steps_lost) == (30, 10)
    assert term.detection_s == pytest.approx(0.5)
    assert (term.resume_step, term.steps_lost) == (70, 0)
    assert term.recovery_s == pytest.approx(2.0)
    assert (figures.restarts, figures.outcome) == (2, "succeeded")


def scenario(events: list[Event], texts: list[str], result: str | None = "r",
             baseline: str | None = "r") -> ScenarioResult:
    faults = parse_faults(texts, "f", "t")
    planned = resolve(faults, TASKS, 0)
    outcome = ScenarioResult("s", 0, Path("/x"), tuple(faults), tuple(planned), 0,
                             run_figures(events), compare(result, baseline))
    judge(outcome)
    return outcome


def test_a_good_drill_passes() -> None:
    assert scenario(two_faults(), ["kill:worker:1:at-step=40", "term:chief:at-step=70"]).passed


def test_a_fault_never_injected_fails_the_drill() -> None:
    events = [e for e in two_faults() if e.get("action") != "term"]
    outcome = scenario(events, ["kill:worker:1:at-step=40", "term:chief:at-step=70"])
    assert outcome.problems == ["term:chief:0:at-step=70 was never injected (its trigger "
                                "at-step=70 never came): a drill that hurt nothing proved nothing"]


def test_a_term_that_lost_steps_fails_the_drill() -> None:
    events = two_faults()
    events[12] = {**events[12], "resume_step": 60}
    outcome = scenario(events, ["kill:worker:1:at-step=40", "term:chief:at-step=70"])
    assert outcome.problems == ["term:chief:0:at-step=70 lost 10 step(s): a preemption notice "
                                "must lose none"]
    outcome.problems.clear()
    outcome.checkpointing = False  # no checkpoint.dir: every restart is from step 0 by design
    judge(outcome)
    assert outcome.passed


@pytest.mark.parametrize(("result", "baseline", "check", "fails"), [
    ("a", "a", Check.MATCH, False), ("a", "b", Check.DIFFERS, True),
    (None, "b", Check.MISSING, True), ("a", None, Check.UNCHECKED, False),
])
def test_result_checks(result: str | None, baseline: str | None, check: Check,
                       fails: bool) -> None:
    outcome = scenario(two_faults(), ["kill:worker:1:at-step=40", "term:chief:at-step=70"],
                       result, baseline)
    assert outcome.verdict.check is check
    assert (not outcome.passed) is fails


def test_a_failed_job_fails_the_drill() -> None:
    events = [*two_faults()[:-1], ev(12.0, "job_failed")]
    outcome = scenario(events, ["kill:worker:1:at-step=40", "term:chief:at-step=70"])
    assert outcome.problems == ["the job failed (exit code 0)"]


def test_the_result_is_the_last_attempts(tmp_path: Path) -> None:
    for attempt, value in ((0, "old"), (2, "abc"), (10, "new")):
        (tmp_path / f"attempt-{attempt}").mkdir()
        (tmp_path / f"attempt-{attempt}" / "chief-0.log").write_text(
            f"noise\ntfcluster-result: {value}\nmore\n")
    (tmp_path / "attempt-10" / "worker-0.log").write_text("no result here\n")
    assert final_result(tmp_path) == "new"
    (tmp_path / "attempt-10" / "worker-1.log").write_text(f"weights_sha256={'f' * 64}\n")
    assert final_result(tmp_path) == f"new | weights_sha256={'f' * 64}"  # tasks disagree
    assert final_result(tmp_path / "nothing") is None
