"""A calm console: TF noise left out (``--verbose`` shows it), long lines cut, and once a task
failed the survivors' output goes to their logs only, with one line per survivor after the root
cause. Driven with scripted event records and a scripted clock."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from launcher.output.console import MAX_LINE_CHARS, Console
from launcher.output.held import HeldLines

NOISE = "I0000 00:00:1796144568.226795   16633 port.cc:153] oneDNN custom operations are on."


@pytest.fixture(autouse=True)
def _no_colour_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def make(**options: Any) -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out=out, err=err, colour=False, **options), out, err


def test_tf_start_up_noise_stays_off_the_console_unless_verbose() -> None:
    calm, out, err = make()
    calm.task_line("worker:0", NOISE)
    calm.task_line("worker:0", "step 1")
    assert out.getvalue() == "[worker:0] step 1\n"
    assert calm.noise_lines == 1
    calm.close()
    assert err.getvalue() == ("tfcluster: 1 line(s) of known TensorFlow noise not shown "
                              "(they are in the task logs; --verbose shows them)\n")
    verbose, out, _ = make(verbose=True)
    verbose.task_line("worker:0", NOISE)
    assert out.getvalue() == f"[worker:0] {NOISE}\n"


def test_a_long_line_is_cut_on_the_console_and_says_so() -> None:
    calm, out, _ = make()
    calm.task_line("worker:0", "x" * (MAX_LINE_CHARS + 500))
    shown = out.getvalue()
    assert shown.startswith("[worker:0] " + "x" * MAX_LINE_CHARS + "\u2026")
    assert "[500 more characters in the task log]" in shown
    assert len(shown) < MAX_LINE_CHARS + 100


def test_a_failure_withdraws_the_other_tasks_held_lines_and_drops_later_ones() -> None:
    shown: list[tuple[str, str]] = []
    held = HeldLines(lambda task, line: shown.append((task, line)), hold_s=60)
    held.add("chief:0", "step 599")
    held.add("worker:1", "worker:1's last words")
    held.add("chief:0", "Aborting RingReduce")  # the survivors' first reaction: still held
    held.mute("worker:1")
    held.add("worker:0", "Traceback (most recent call last):")  # while muted: dropped
    held.add("worker:1", "after its death")
    assert shown == [("worker:1", "worker:1's last words")]
    assert held.unmute() == {"chief:0": 2, "worker:0": 1, "worker:1": 1}
    held.add("chief:0", "attempt 1 starts")
    held.close()
    assert shown[-1] == ("chief:0", "attempt 1 starts")


def test_held_lines_are_shown_after_the_hold_without_being_asked() -> None:
    shown: list[str] = []
    held = HeldLines(lambda task, line: shown.append(line), hold_s=0.05)
    held.add("worker:0", "hello")
    deadline = time.monotonic() + 10
    while not shown and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shown == ["hello"]
    held.close()


def records(*, kind: str = "signalled") -> list[dict[str, Any]]:
    return [
        {"event": "attempt_started", "attempt": 0},
        *({"event": "task_started", "attempt": 0, "task": task,
           "log": f"/runs/r/attempt-0/{task.replace(':', '-')}.log"}
          for task in ("chief:0", "worker:0", "worker:1")),
        {"event": "task_failed", "task": "worker:1", "kind": kind, "died_at": 50.0,
         "observed_at": 50.1},
        {"event": "task_exited", "task": "chief:0", "exit_code": None, "signal": "SIGTERM",
         "stopped": True},
        {"event": "task_exited", "task": "worker:0", "exit_code": None, "signal": "SIGKILL",
         "stopped": True},
    ]


def test_after_a_failure_survivors_are_silent_and_each_gets_one_line_after_the_root_cause() -> None:
    calm, out, err = make()
    events = records()
    for record in events[:4]:
        calm.calm.on_event(record)
    calm.task_line("chief:0", "step 10")
    calm.calm.on_event(events[4])  # worker:1 failed: from now on the survivors are its to stop
    for line in ("Traceback (most recent call last):", "UnavailableError: Collective ops is "
                 "aborted by: recvmsg:Connection reset by peer"):
        calm.task_line("chief:0", line)
        calm.task_line("worker:0", line)
    for record in events[5:]:
        calm.calm.on_event(record)
    calm.failure_report("Root cause (first observed failure): worker:1 was killed by SIGKILL")
    assert out.getvalue() == "[chief:0] step 10\n"
    assert err.getvalue().splitlines() == [
        "tfcluster: Root cause (first observed failure): worker:1 was killed by SIGKILL",
        "tfcluster: chief:0 stopped by tfcluster (SIGTERM); 2 more line(s) in "
        "/runs/r/attempt-0/chief-0.log",
        "tfcluster: worker:0 killed by tfcluster (SIGKILL: it outlived SIGTERM's grace period); "
        "2 more line(s) in /runs/r/attempt-0/worker-0.log",
    ]
    calm.task_line("chief:0", "attempt 1, resumed at step 600")  # the next attempt is shown
    assert out.getvalue().endswith("[chief:0] attempt 1, resumed at step 600\n")


def test_a_preemption_is_not_muted_the_tasks_say_what_they_saved() -> None:
    calm, out, err = make()
    for record in records(kind="preempted")[:5]:
        calm.calm.on_event(record)
    calm.task_line("chief:0", "preempted: checkpoint saved at step 120")
    calm.failure_report("Preempted at 12:00:00: worker:1 exited 42")
    assert out.getvalue() == "[chief:0] preempted: checkpoint saved at step 120\n"
    assert err.getvalue() == "tfcluster: Preempted at 12:00:00: worker:1 exited 42\n"


def test_verbose_shows_the_survivors_too() -> None:
    calm, out, _ = make(verbose=True)
    for record in records()[:5]:
        calm.calm.on_event(record)
    calm.task_line("chief:0", "Traceback (most recent call last):")
    assert out.getvalue() == "[chief:0] Traceback (most recent call last):\n"


def test_task_lines_held_before_a_message_of_tfcluster_come_out_before_it() -> None:
    calm, out, _ = make(hold_s=60)
    calm.task_line("worker:0", "step 1")
    assert out.getvalue() == ""
    calm.say("restarting")
    assert out.getvalue() == "[worker:0] step 1\n"
    calm.task_line("worker:0", "step 2")
    calm.close()
    assert out.getvalue().endswith("[worker:0] step 2\n")


def test_a_progress_line_leaves_held_lines_for_a_failure_known_after_it_to_withdraw() -> None:
    # CI failure under load: the periodic progress line showed a survivor's reaction to a death
    # (an aborted collective) that tfcluster learned of a moment later
    calm, out, err = make(hold_s=60)
    events = records()
    for record in events[:4]:
        calm.calm.on_event(record)
    calm.task_line("chief:0", "Aborting RingReduce with UNAVAILABLE: Socket closed")
    calm.progress("attempt 0: chief:0 running step 79, worker:1 running step 128")
    calm.calm.on_event(events[4])  # worker:1 failed
    assert out.getvalue() == ""
    assert err.getvalue() == ("tfcluster: attempt 0: chief:0 running step 79, worker:1 running "
                              "step 128\n")
    calm.close()
    assert out.getvalue() == ""


def test_lines_for_the_job_start_wait_for_the_job_to_start() -> None:
    calm, _, err = make(at_job_start=["running 'python3' as tfcluster's own interpreter"])
    calm.on_event({"event": "attempt_started", "attempt": 0})
    assert err.getvalue() == ""  # e.g. a run directory error would have been the only line
    calm.on_event({"event": "job_started", "job": "local"})
    calm.on_event({"event": "job_started", "job": "local"})
    assert err.getvalue() == "tfcluster: running 'python3' as tfcluster's own interpreter\n"
