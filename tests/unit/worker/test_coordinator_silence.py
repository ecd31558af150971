"""An agent whose coordinator is stopped (Ctrl-Z) does not take its silence for a loss, and gives
it a whole timeout once it runs again; a running but silent coordinator is lost as before."""

from __future__ import annotations

import pytest

from worker.agent import coordinator_silence
from worker.agent.coordinator_silence import RECHECK_S, CoordinatorSilence


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    state = [False]
    monkeypatch.setattr(coordinator_silence, "parent_stopped", lambda: state[0])
    return state


def test_a_silent_coordinator_that_runs_is_gone_after_the_timeout(stopped: list[bool]) -> None:
    silence = CoordinatorSilence(0.0, note=lambda _: None)
    assert not silence.gone(5.0, 4.9)
    assert silence.wake_at(5.0) == 5.0
    assert silence.gone(5.0, 5.0)
    assert not silence.gone(None, 1000.0)  # no timeout: never


def test_a_stopped_coordinator_is_waited_for_and_then_given_a_whole_timeout(
        stopped: list[bool]) -> None:
    notes: list[str] = []
    silence = CoordinatorSilence(0.0, note=notes.append)
    stopped[0] = True
    assert not silence.gone(5.0, 5.0)
    assert not silence.gone(5.0, 300.0)  # Ctrl-Z for minutes
    assert silence.wake_at(5.0) == 300.0 + RECHECK_S  # looked at again soon
    stopped[0] = False  # fg
    assert not silence.gone(5.0, 301.0)
    assert not silence.gone(5.0, 304.9)
    assert silence.gone(5.0, 305.0)  # running, and silent for a whole timeout since
    assert len(notes) == 2 and "stopped" in notes[0], notes  # said once, and once it runs again


def test_a_word_from_the_coordinator_ends_the_wait(stopped: list[bool]) -> None:
    silence = CoordinatorSilence(0.0, note=lambda _: None)
    stopped[0] = True
    assert not silence.gone(5.0, 6.0)
    stopped[0] = False
    silence.heard(6.5)
    assert not silence.gone(5.0, 11.4)
    assert silence.gone(5.0, 11.5)


def test_a_coordinator_that_said_it_pauses_is_waited_for_until_it_is_heard_again(
        stopped: list[bool]) -> None:
    """Over SSH the agent cannot see the coordinator stopped: its Pause is what it goes by."""
    notes: list[str] = []
    silence = CoordinatorSilence(0.0, note=notes.append)
    silence.heard(1.0, paused=True)  # Ctrl-Z: the Pause, then nothing
    assert not silence.gone(5.0, 3600.0)  # an hour: the tasks go on
    assert silence.wake_at(5.0) is None  # nothing to look at: only EOF ends the pause
    silence.heard(3601.0)  # fg: the next ping
    assert not silence.gone(5.0, 3605.9)
    assert silence.gone(5.0, 3606.0)  # running, silent a whole timeout: gone as before
    assert len(notes) == 2 and "Ctrl-Z" in notes[0] and "runs again" in notes[1], notes
