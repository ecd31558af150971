"""The verdict of a drill whose job changed size on the way (a pool job that lost a host and ran
smaller): the sizes per attempt from ``attempt_placed`` events, the result not compared with the
baseline then (and compared as ever when the size never changed), the report saying so; and the
figures of ``lose-host`` / ``heal``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.drill.faults import parse_faults
from launcher.drill.figures import run_figures
from launcher.drill.injector import resolve
from launcher.drill.report import notes, table, write
from launcher.drill.session import ScenarioResult, judge
from launcher.drill.verdict import Baseline, Check, attempt_sizes, compare

Event = dict[str, Any]
TASKS = {"chief:0": "h1", "worker:0": "h2"}
FAULTS = ["lose-host:h2:at-step=40", "heal:h2:after=20"]


def ev(ts: float, event: str, **fields: Any) -> Event:
    return {"ts": ts, "event": event, **fields}


def placed(ts: float, attempt: int, workers: int) -> Event:
    return ev(ts, "attempt_placed", attempt=attempt, workers=workers, max_workers=2,
              placement={}, spares=[], left_out={})


def pool_run(sizes: tuple[int, ...] = (2, 1, 2)) -> list[Event]:
    """h2 lost at step 40 (attempt 0); attempt 1 runs without it from step 30; h2 comes back 20 s
    later; attempt 2 runs with it again."""
    events = [placed(0.0, 0, sizes[0]), ev(0.1, "attempt_started", attempt=0, resume_step=None),
              ev(1.0, "task_progress", task="chief:0", step=1, attempt=0, first=True),
              ev(5.0, "fault_injected", attempt=0, fault=FAULTS[0], action="lose-host",
                 task="worker:0", tasks=["worker:0"], host="h2", step=40, sent_at=4.9),
              ev(8.0, "task_failed", task="worker:0", attempt=0, kind="lost_host",
                 observed_at=8.0),
              # the chief's last report, written as it exits
              ev(8.2, "task_progress", task="chief:0", step=40, attempt=0, first=False),
              ev(8.5, "job_restarting", attempt=1)]
    for attempt, size in enumerate(sizes[1:], 1):
        start = 9.0 + 20 * (attempt - 1)
        events += [placed(start, attempt, size),
                   ev(start + 0.1, "attempt_started", attempt=attempt, resume_step=30),
                   ev(start + 1.0, "task_progress", task="chief:0", step=31, attempt=attempt,
                      first=True)]
        if attempt == 1:
            events += [ev(25.0, "fault_injected", attempt=1, fault=FAULTS[1], action="heal",
                          task="worker:0", tasks=["worker:0"], host="h2", step=60, sent_at=24.9),
                       ev(27.0, "job_restarting", attempt=2)]
    return [*events, ev(60.0, "job_succeeded")]


def scenario(events: list[Event], result: str | None = "new",
             baseline: str | None = "old") -> ScenarioResult:
    faults = parse_faults(FAULTS, "f", "t")
    outcome = ScenarioResult("lose-h2", 0, Path("/runs/lose-h2"), tuple(faults),
                             tuple(resolve(faults, TASKS, 0)), 0, run_figures(events),
                             compare(result, baseline, attempt_sizes(events)))
    judge(outcome)
    return outcome


def test_sizes_per_attempt_come_from_attempt_placed() -> None:
    assert attempt_sizes(pool_run()) == (2, 1, 2)
    assert attempt_sizes([e for e in pool_run() if e["event"] != "attempt_placed"]) == ()
    replaced = [placed(0.0, 0, 2), placed(0.5, 0, 1), placed(1.0, 1, 1),  # placed again: the last
                {"event": "attempt_placed", "attempt": 2}, {"event": "attempt_placed",
                                                            "attempt": "x", "workers": 3}]
    assert attempt_sizes(replaced) == (1, 1)  # records without a size are no size


@pytest.mark.parametrize(("result", "baseline", "sizes", "check", "fails"), [
    ("a", "b", (2, 1, 2), Check.RESIZED, False),   # another size: not compared
    ("a", "a", (2, 1), Check.RESIZED, False),
    ("a", "b", (2, 2), Check.DIFFERS, True),       # one size: compared as ever
    ("a", "a", (1, 1), Check.MATCH, False),
    ("a", "b", (), Check.DIFFERS, True),           # no placements recorded: one size
    (None, "b", (2, 1), Check.MISSING, True),      # no result at all is still missing
    ("a", None, (2, 1), Check.UNCHECKED, False),   # nothing to compare with
])
def test_the_result_is_compared_only_when_the_size_never_changed(
        result: str | None, baseline: str | None, sizes: tuple[int, ...], check: Check,
        fails: bool) -> None:
    verdict = compare(result, baseline, sizes)
    assert verdict.check is check and verdict.failed is fails and verdict.sizes == sizes


def test_a_drill_that_changed_size_passes_with_another_result_and_says_why() -> None:
    outcome = scenario(pool_run())
    assert outcome.passed, outcome.problems
    assert outcome.verdict.check is Check.RESIZED
    assert notes([outcome]) == ["lose-h2: sizes per attempt: 2, 1, 2 — result not compared with "
                                "the baseline: the job ran at another size"]
    assert table([outcome])[2].endswith("| resized |")


def test_a_drill_that_kept_its_size_is_compared_as_ever() -> None:
    outcome = scenario(pool_run((2, 2, 2)))
    assert outcome.problems == ["result DIFFERS: new (baseline old)"]
    assert notes([outcome]) == []
    assert scenario(pool_run((2, 2, 2)), result="old").passed


def test_the_sizes_are_noted_without_a_baseline_too() -> None:
    outcome = scenario(pool_run(), baseline=None)
    assert outcome.verdict.check is Check.UNCHECKED
    assert notes([outcome]) == ["lose-h2: sizes per attempt: 2, 1, 2"]


def test_the_files_say_the_sizes(tmp_path: Path) -> None:
    write(tmp_path, [scenario(pool_run())], seed=0, baseline=Baseline("old"), baseline_from=None,
          picture=None)
    data, = json.loads((tmp_path / "drill.json").read_text())["scenarios"]
    assert (data["result_check"], data["sizes"], data["passed"]) == ("resized", [2, 1, 2], True)
    text = (tmp_path / "drill.md").read_text()
    assert "  - sizes per attempt: 2, 1, 2 — result not compared with the baseline: the job ran " \
           "at another size\n" in text
    assert "`lose-host:h2:at-step=40` → h2 at step 40, detected as lost_host (worker:0), resumed " \
           "at step 30" in text
    assert "`heal:h2:after=20` → h2 at step 60" in text


def test_lose_host_figures_and_a_heal_that_hurts_nothing() -> None:
    lose, heal = run_figures(pool_run()).faults
    assert (lose.action, lose.host, lose.detected_as) == ("lose-host", "h2", "lost_host (worker:0)")
    assert lose.detection_s == pytest.approx(3.1)  # from sent_at
    assert (lose.resume_step, lose.steps_lost) == (30, 10)
    assert (heal.action, heal.host, heal.injected_at) == ("heal", "h2", 24.9)
    assert (heal.detected_as, heal.detection_s, heal.teardown_s, heal.recovery_s,
            heal.resume_step, heal.steps_lost) == (None,) * 6
