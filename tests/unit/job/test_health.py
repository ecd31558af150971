"""``HealthMonitor`` fed scripted times: hung tasks, start-up timeouts, lost hosts, and deadlines."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from launcher.job.health import HealthIssue, HealthMonitor
from launcher.run.failures import FailureKind
from launcher.spec.health import HealthSpec

HUNG, STARTUP, LOST = FailureKind.HUNG, FailureKind.STARTUP_TIMEOUT, FailureKind.LOST_HOST

# A script is what the agents reported, in order, with the time it arrived:
#   ("start", task, host, t)  ("step", task, step, t)  ("done", task)
#   ("seen", host, t)         ("gone", host)
Step = tuple[Any, ...]


def spec(startup: float | None = 30.0, hang: float | None = 60.0,
         heartbeat: float = 15.0) -> HealthSpec:
    return HealthSpec(startup_timeout_s=startup, hang_timeout_s=hang, heartbeat_timeout_s=heartbeat)


def monitor(health: HealthSpec, script: list[Step], created: float = 0.0) -> HealthMonitor:
    watched = HealthMonitor(health, now=created)
    for action, *args in script:
        if action == "start":
            watched.task_started(args[0], args[1], now=args[2])
        elif action == "step":
            watched.progress(args[0], args[1], now=args[2])
        elif action == "done":
            watched.task_done(args[0])
        elif action == "seen":
            watched.host_seen(args[0], now=args[1])
        elif action == "gone":
            watched.host_gone(args[0])
        else:
            raise AssertionError(f"unknown script action {action!r}")
    return watched


def found(issues: list[HealthIssue]) -> list[tuple[FailureKind, str]]:
    return [(i.kind, i.task if i.task is not None else i.host) for i in issues]


class Case(NamedTuple):
    health: HealthSpec
    script: list[Step]
    now: float
    issues: list[tuple[FailureKind, str]]


W0 = "worker:0"
STARTED = ("start", W0, "node-a", 0.0)

CASES = {
    # --- hang: steps were reported, then no new one for hang_timeout_s -------------------------
    "hung exactly at the deadline": Case(spec(), [STARTED, ("step", W0, 1, 10.0)], 70.0,
                                         [(HUNG, W0)]),
    "not hung just before the deadline": Case(spec(), [STARTED, ("step", W0, 1, 10.0)], 69.999, []),
    "the same step again is not progress": Case(
        spec(), [STARTED, ("step", W0, 1, 10.0), ("step", W0, 1, 50.0), ("step", W0, 1, 69.0)],
        70.0, [(HUNG, W0)]),
    "a new step moves the deadline": Case(
        spec(), [STARTED, ("step", W0, 1, 10.0), ("step", W0, 2, 50.0)], 109.999, []),
    "hung a hang_timeout_s after the last new step": Case(
        spec(), [STARTED, ("step", W0, 1, 10.0), ("step", W0, 2, 50.0)], 110.0, [(HUNG, W0)]),
    "a step lower than the last one is still a new step": Case(
        spec(), [STARTED, ("step", W0, 5, 10.0), ("step", W0, 4, 50.0)], 70.0, []),
    # --- start-up: no step at all within startup_timeout_s of the task starting -----------------
    "startup timeout exactly at the deadline": Case(spec(), [("start", W0, "node-a", 5.0)], 35.0,
                                                    [(STARTUP, W0)]),
    "no startup timeout just before it": Case(spec(), [("start", W0, "node-a", 5.0)], 34.999, []),
    "startup counts from the task's start, not the attempt's": Case(
        spec(), [("start", W0, "node-a", 20.0)], 49.0, []),
    "a first step ends the startup check": Case(
        spec(), [STARTED, ("step", W0, 0, 29.0)], 31.0, []),
    "after the first step the hang check applies": Case(
        spec(), [STARTED, ("step", W0, 0, 29.0)], 89.0, [(HUNG, W0)]),
    "a slow start-up is not a hang": Case(spec(startup=300.0, hang=10.0), [STARTED], 100.0, []),
    # --- finished tasks -------------------------------------------------------------------------
    "a finished task is never hung": Case(
        spec(), [STARTED, ("step", W0, 1, 1.0), ("done", W0)], 1e9, []),
    "a task that finished before any step never times out": Case(
        spec(), [STARTED, ("done", W0)], 1e9, []),
    # --- null timeouts turn checks off ----------------------------------------------------------
    "hang_timeout_s null: a silent task is never hung": Case(
        spec(hang=None), [STARTED, ("step", W0, 1, 1.0)], 1e9, []),
    "startup_timeout_s null: a task with no steps is fine": Case(spec(startup=None), [STARTED], 1e9,
                                                                []),
    "hang null does not turn off the startup check": Case(spec(hang=None), [STARTED], 30.0,
                                                          [(STARTUP, W0)]),
    "startup null does not turn off the hang check": Case(
        spec(startup=None), [STARTED, ("step", W0, 1, 1.0)], 61.0, [(HUNG, W0)]),
    # --- hosts ----------------------------------------------------------------------------------
    "a host silent for heartbeat_timeout_s is lost": Case(spec(), [("seen", "node-a", 10.0)], 25.0,
                                                          [(LOST, "node-a")]),
    "a host is not lost just before that": Case(spec(), [("seen", "node-a", 10.0)], 24.999, []),
    "any message from a host keeps it alive": Case(
        spec(), [("seen", "node-a", 10.0), ("seen", "node-a", 20.0)], 34.999, []),
    "a host that is gone is no longer watched": Case(
        spec(), [("seen", "node-a", 10.0), ("gone", "node-a")], 1e9, []),
    "only the silent host is lost": Case(
        spec(), [("seen", "node-a", 10.0), ("seen", "node-b", 20.0)], 25.0, [(LOST, "node-a")]),
    "a host is watched even when its tasks have finished": Case(
        spec(), [("seen", "node-a", 0.0), STARTED, ("done", W0)], 15.0, [(LOST, "node-a")]),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_check(case: Case) -> None:
    assert found(monitor(case.health, case.script).check(case.now)) == case.issues


def test_a_hung_issue_says_where_since_when_and_at_which_step() -> None:
    watched = monitor(spec(), [("start", W0, "node-b", 0.0), ("step", W0, 7, 10.0),
                               ("step", W0, 7, 40.0)])
    (issue,) = watched.check(70.0)
    assert (issue.kind, issue.host, issue.task, issue.since) == (HUNG, "node-b", W0, 10.0)
    assert "60s" in issue.message
    assert "step 7" in issue.message


def test_a_startup_issue_counts_from_the_task_start() -> None:
    (issue,) = monitor(spec(), [("start", W0, "node-b", 4.0)]).check(34.0)
    assert (issue.kind, issue.host, issue.task, issue.since) == (STARTUP, "node-b", W0, 4.0)
    assert "30s" in issue.message


def test_a_lost_host_issue_names_the_host_and_no_task() -> None:
    (issue,) = monitor(spec(), [("seen", "node-c", 3.0)]).check(18.0)
    assert (issue.kind, issue.host, issue.task, issue.since) == (LOST, "node-c", None, 3.0)
    assert "15s" in issue.message


def test_progress_of_a_task_that_never_started_is_ignored() -> None:
    watched = monitor(spec(), [("step", W0, 1, 1.0)])
    assert watched.check(1e9) == []
    assert watched.next_deadline() is None


# --- next_deadline: when the coordinator must ask again ---------------------------------------


class DeadlineCase(NamedTuple):
    health: HealthSpec
    script: list[Step]
    deadline: float | None


DEADLINES = {
    "nothing watched": DeadlineCase(spec(), [], None),
    "only finished tasks": DeadlineCase(spec(), [STARTED, ("step", W0, 1, 1.0), ("done", W0)], None),
    "every check off": DeadlineCase(spec(startup=None, hang=None),
                                    [STARTED, ("start", "worker:1", "node-a", 0.0),
                                     ("step", W0, 1, 2.0)], None),
    "a gone host": DeadlineCase(spec(), [("seen", "node-a", 1.0), ("gone", "node-a")], None),
    "startup of a started task": DeadlineCase(spec(), [("start", W0, "node-a", 5.0)], 35.0),
    "hang of a stepping task": DeadlineCase(spec(), [STARTED, ("step", W0, 3, 12.0)], 72.0),
    "repeated steps do not push it back": DeadlineCase(
        spec(), [STARTED, ("step", W0, 3, 12.0), ("step", W0, 3, 40.0)], 72.0),
    "a host heartbeat": DeadlineCase(spec(), [("seen", "node-a", 7.0)], 22.0),
    "the earliest of all": DeadlineCase(
        spec(), [("seen", "node-a", 100.0), ("start", W0, "node-a", 0.0),
                 ("start", "worker:1", "node-a", 0.0), ("step", "worker:1", 1, 10.0),
                 ("start", "chief:0", "node-a", 50.0)],
        30.0),
    "the earliest is a host": DeadlineCase(
        spec(), [("seen", "node-a", 1.0), ("seen", "node-b", 0.5), STARTED], 15.5),
    "the earliest is a hang": DeadlineCase(
        spec(startup=300.0, hang=20.0, heartbeat=200.0),
        [("seen", "node-a", 0.0), STARTED, ("step", W0, 1, 5.0),
         ("start", "worker:1", "node-a", 0.0)], 25.0),
    "finished tasks do not count": DeadlineCase(
        spec(), [STARTED, ("start", "worker:1", "node-a", 10.0), ("done", W0)], 40.0),
}


@pytest.mark.parametrize("case", DEADLINES.values(), ids=DEADLINES.keys())
def test_next_deadline(case: DeadlineCase) -> None:
    watched = monitor(case.health, case.script)
    deadline = watched.next_deadline()
    assert deadline == case.deadline
    if deadline is not None:
        # Sleeping exactly until the deadline is enough: an issue is due then, and none before.
        assert watched.check(deadline - 1e-6) == []
        assert watched.check(deadline) != []


def test_check_orders_issues_longest_standing_first() -> None:
    watched = monitor(spec(), [
        ("start", "worker:0", "node-a", 0.0), ("step", "worker:0", 1, 10.0),  # hung since 10
        ("seen", "node-b", 5.0),                                                # lost since 5
        ("start", "worker:1", "node-a", 2.0),                                   # stuck since 2
        ("start", "chief:0", "node-a", 1.0), ("step", "chief:0", 1, 7.0),       # hung since 7
    ])
    issues = watched.check(1000.0)
    assert found(issues) == [(STARTUP, "worker:1"), (LOST, "node-b"), (HUNG, "chief:0"),
                             (HUNG, "worker:0")]
    assert [i.since for i in issues] == [2.0, 5.0, 7.0, 10.0]


@pytest.mark.parametrize("seed", range(40))
def test_what_check_finds_is_what_a_scan_of_every_deadline_finds(seed: int) -> None:
    """The monitor looks at its deadlines only when the earliest may have passed: on random
    feeds (tasks starting, stepping, ending; hosts seen and gone; checks in between) it finds
    exactly the issues that a scan of all of them does, and wakes the loop in time for the next."""
    import random

    rng = random.Random(seed)
    health = spec(startup=rng.choice([None, 5.0, 30.0]), hang=rng.choice([None, 2.0, 60.0]),
                  heartbeat=rng.choice([3.0, 15.0]))
    watched = HealthMonitor(health, now=0.0)
    now = 0.0
    for _ in range(200):
        now += rng.expovariate(1.0)
        action = rng.random()
        task, host = f"worker:{rng.randrange(4)}", f"h{rng.randrange(2)}"
        if action < 0.15:
            watched.task_started(task, host, now=now)
        elif action < 0.55:
            watched.progress(task, rng.randrange(1000), now=now)
        elif action < 0.6:
            watched.task_done(task)
        elif action < 0.8:
            watched.host_seen(host, now=now)
        elif action < 0.83:
            watched.host_gone(host)
        deadlines = watched._deadlines()
        expected = sorted((i for d, i in deadlines if d <= now), key=lambda i: i.since)
        assert watched.check(now) == expected
        upcoming = min((d for d, _ in deadlines), default=None)
        found = watched.next_deadline()
        # never later than the next deadline (it may name a time before it, or one after a
        # deadline that went away: the loop then wakes once for nothing), never in the past
        assert upcoming is None or (found is not None and found <= upcoming)
        assert found is None or found > now or (upcoming is not None and upcoming <= now)
