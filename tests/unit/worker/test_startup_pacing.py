"""Start-up pacing (worker.agent.startup_pacing), driven with a scripted clock and scripted process
states: which tasks may start, in what order, and when a slot is free again."""

from __future__ import annotations

import os

import pytest

from worker.agent.startup_pacing import (
    FIRST_LOOK_S,
    HOLD_S,
    POLL_S,
    StartupPacer,
    slots_for,
    usable_cpus,
)


class States:
    """Scripted ``is_busy``: a pid is busy unless marked idle; every look is counted."""

    def __init__(self) -> None:
        self.idle: set[int] = set()
        self.looks: list[int] = []

    def __call__(self, pid: int) -> bool:
        self.looks.append(pid)
        return pid not in self.idle


def pacer(slots: int | None) -> tuple[StartupPacer[str], States]:
    states = States()
    paced: StartupPacer[str] = StartupPacer(slots, is_busy=states)
    for name in ("a", "b", "c", "d"):
        paced.queue(name, name.upper())
    return paced, states


def names(admitted: list[tuple[str, str]]) -> list[str]:
    return [item for _, item in admitted]


def test_the_slots_are_the_usable_cpus_unless_the_spec_says_otherwise() -> None:
    assert usable_cpus() == len(os.sched_getaffinity(0))
    assert slots_for(None) == usable_cpus()
    assert slots_for(3) == 3
    assert slots_for(0) is None  # no limit


def test_tasks_start_in_order_as_slots_free_up() -> None:
    paced, _ = pacer(2)
    assert names(paced.admit(0.0)) == ["A", "B"]
    paced.started("a", 101)
    paced.started("b", 102)
    assert paced.admit(0.001) == []
    assert paced.waiting == 2
    paced.settled("b")  # it wrote something, or exited
    assert names(paced.admit(0.002)) == ["C"]
    paced.settled("a")
    paced.started("c", 103)
    assert names(paced.admit(0.003)) == ["D"]
    assert paced.waiting == 0


def test_a_warm_or_failed_start_needs_no_slot() -> None:
    paced, _ = pacer(1)
    assert names(paced.admit(0.0)) == ["A"]
    paced.started("a", None)  # from a warm spare, or it could not be started at all
    assert names(paced.admit(0.0)) == ["B"]


def test_without_a_limit_every_task_starts_at_once() -> None:
    paced, states = pacer(None)
    assert names(paced.admit(0.0)) == ["A", "B", "C", "D"]
    assert paced.due_at(0.0) is None
    assert states.looks == []


def test_a_task_that_sleeps_frees_its_slot_once_looked_at() -> None:
    paced, states = pacer(1)
    paced.admit(0.0)
    paced.started("a", 101)
    states.idle.add(101)
    assert paced.admit(FIRST_LOOK_S / 2) == []  # too soon to look: it may still be exec'ing
    assert states.looks == []
    assert paced.due_at(FIRST_LOOK_S / 2) == pytest.approx(FIRST_LOOK_S)
    assert names(paced.admit(FIRST_LOOK_S)) == ["B"]
    assert states.looks == [101]


def test_a_busy_task_is_looked_at_every_poll_until_its_hold_ends() -> None:
    paced, states = pacer(1)
    paced.admit(0.0)
    paced.started("a", 101)
    assert paced.admit(FIRST_LOOK_S) == []
    assert paced.admit(FIRST_LOOK_S + POLL_S / 2) == []  # looked at a moment ago
    assert paced.admit(FIRST_LOOK_S + POLL_S) == []
    assert states.looks == [101, 101]
    assert paced.due_at(FIRST_LOOK_S + POLL_S) == pytest.approx(FIRST_LOOK_S + 2 * POLL_S)
    assert names(paced.admit(HOLD_S)) == ["B"]  # busy all along: its hold is over


def test_the_hold_counts_from_when_the_start_returned() -> None:
    # a start slowed down (its program read from a loaded disk) keeps its whole hold
    paced, states = pacer(1)
    paced.admit(0.0)
    paced.started("a", 101, now=0.1)
    assert paced.admit(0.1 + FIRST_LOOK_S / 2) == []
    assert states.looks == []  # its first look counts from its start too
    assert paced.admit(HOLD_S + 0.05) == []  # a hold from its admission would be over
    assert paced.due_at(HOLD_S + 0.05) == pytest.approx(HOLD_S + 0.05 + POLL_S)
    assert names(paced.admit(0.1 + HOLD_S)) == ["B"]


def test_nothing_to_wake_for_when_nothing_waits_and_now_when_a_slot_is_free() -> None:
    paced, _ = pacer(2)
    assert paced.due_at(0.0) == 0.0
    paced.admit(0.0)
    paced.clear()
    assert paced.due_at(0.0) is None


def test_clear_gives_back_the_waiting_tasks_and_forgets_the_slots() -> None:
    paced, _ = pacer(1)
    paced.admit(0.0)
    paced.started("a", 101)
    assert paced.clear() == ["B", "C", "D"]
    assert paced.waiting == 0
    paced.queue("e", "E")
    assert names(paced.admit(0.0)) == ["E"]  # a's slot went with the old attempt
