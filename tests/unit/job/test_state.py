"""The job state machine: the documented transitions pass, every other one raises and says why."""

from __future__ import annotations

import itertools

import pytest

from launcher.job.state import TRANSITIONS, IllegalTransitionError, JobState, JobStateMachine

S = JobState

#: The transitions the coordinator relies on (see the diagram in launcher/state.py).
LEGAL = {
    (S.PENDING, S.STARTING),
    (S.PENDING, S.FAILED),  # pre-flight failed: nothing was started
    (S.STARTING, S.RUNNING),
    (S.STARTING, S.STOPPING),  # a task died before anyone reported progress
    (S.STARTING, S.SUCCEEDED),  # every task exited 0 before its first report
    (S.RUNNING, S.STOPPING),
    (S.RUNNING, S.SUCCEEDED),
    (S.STOPPING, S.RESTARTING),
    (S.STOPPING, S.FAILED),
    (S.STOPPING, S.SUCCEEDED),  # a parameter_server job: its chief exited 0, servers stopped
    (S.RESTARTING, S.STARTING),
    (S.RESTARTING, S.FAILED),  # interrupted during the backoff
}
ILLEGAL = sorted(set(itertools.product(S, S)) - LEGAL)

#: How the machine reaches each state from PENDING along legal transitions.
PATHS = {
    S.PENDING: [],
    S.STARTING: [S.STARTING],
    S.RUNNING: [S.STARTING, S.RUNNING],
    S.STOPPING: [S.STARTING, S.RUNNING, S.STOPPING],
    S.RESTARTING: [S.STARTING, S.RUNNING, S.STOPPING, S.RESTARTING],
    S.SUCCEEDED: [S.STARTING, S.RUNNING, S.SUCCEEDED],
    S.FAILED: [S.STARTING, S.STOPPING, S.FAILED],
}


def machine_in(state: JobState) -> JobStateMachine:
    machine = JobStateMachine()
    for step in PATHS[state]:
        machine.to(step)
    assert machine.state is state
    return machine


def test_a_new_job_is_pending() -> None:
    machine = JobStateMachine()
    assert machine.state is S.PENDING
    assert TRANSITIONS[machine.state]  # not final


@pytest.mark.parametrize(("current", "wanted"), sorted(LEGAL), ids=lambda s: s.value)
def test_legal_transition(current: JobState, wanted: JobState) -> None:
    machine = machine_in(current)
    machine.to(wanted)
    assert machine.state is wanted


@pytest.mark.parametrize(("current", "wanted"), ILLEGAL, ids=lambda s: s.value)
def test_illegal_transition_raises_naming_current_and_allowed(current: JobState,
                                                              wanted: JobState) -> None:
    machine = machine_in(current)
    with pytest.raises(IllegalTransitionError) as info:
        machine.to(wanted)
    assert machine.state is current  # unchanged
    message = str(info.value)
    assert f"from {current.value} to {wanted.value}" in message
    allowed = sorted(w.value for c, w in LEGAL if c is current)
    _, _, listed = message.partition("allowed: ")
    if allowed:
        assert [part.strip() for part in listed.split(",")] == allowed
    else:
        assert "final" in listed


def test_a_whole_restart_cycle() -> None:
    machine = JobStateMachine()
    for state in (S.STARTING, S.RUNNING, S.STOPPING, S.RESTARTING, S.STARTING, S.STOPPING,
                  S.RESTARTING, S.STARTING, S.RUNNING, S.SUCCEEDED):
        machine.to(state)
    assert not TRANSITIONS[machine.state]  # final


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
def test_only_succeeded_and_failed_are_final(state: JobState) -> None:
    assert (not TRANSITIONS[machine_in(state).state]) is (state in (S.SUCCEEDED, S.FAILED))
