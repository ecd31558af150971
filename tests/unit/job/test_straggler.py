"""Step rates, stragglers, memory warnings and the likely-OOM note, on scripted clocks."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.job.memory import MIB, MemoryReading
from launcher.job.straggler import StepRate, StragglerDetector, slowest
from launcher.job.task_health import TaskHealthWatch
from launcher.run.events import JobHealth, TaskMemoryHigh, TaskStraggling
from launcher.run.failures import FailureKind, classify_exit
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Exited, Heartbeat, Progress, Started, TaskUsage


def test_rate_over_the_window_decays_when_a_task_stops() -> None:
    rate = StepRate(window_s=5.0)
    assert rate.rate(0.0) is None
    for t in range(11):
        rate.add(float(t), 10 * t)  # 10 steps/s
    assert rate.rate(10.0) == pytest.approx(10.0)
    # no report for 5 s: the rate runs up to now (from the last two reports) and falls
    assert rate.rate(15.0) == pytest.approx(10 / 6.0)
    assert rate.rate(60.0) < 0.2


def test_a_step_going_backwards_starts_the_rate_over() -> None:
    rate = StepRate()
    rate.add(0.0, 100)
    rate.add(1.0, 110)
    rate.add(2.0, 50)
    assert rate.step == 50
    assert rate.rate(2.0) is None


def flags(detector: StragglerDetector, rates: dict[str, float], now: float) -> list[tuple[str, bool]]:
    return [(c.task, c.straggling) for c in detector.update(rates, now)]


def test_a_task_slow_for_the_whole_window_is_flagged_once_then_cleared() -> None:
    detector = StragglerDetector(ratio=0.5, window_s=30.0)
    slow = {"worker:0": 10.0, "worker:1": 10.0, "worker:2": 4.0}
    assert flags(detector, slow, 0.0) == []
    assert flags(detector, slow, 29.0) == []
    assert flags(detector, slow, 30.0) == [("worker:2", True)]
    assert flags(detector, slow, 35.0) == []  # said once
    assert flags(detector, {**slow, "worker:2": 9.0}, 40.0) == [("worker:2", False)]


def test_a_dip_shorter_than_the_window_is_not_a_straggler() -> None:
    detector = StragglerDetector(ratio=0.5, window_s=30.0)
    fast = {"worker:0": 10.0, "worker:1": 10.0}
    assert flags(detector, {**fast, "worker:2": 1.0}, 0.0) == []
    assert flags(detector, {**fast, "worker:2": 10.0}, 20.0) == []
    assert flags(detector, {**fast, "worker:2": 1.0}, 25.0) == []
    assert flags(detector, {**fast, "worker:2": 1.0}, 54.0) == []  # 29 s since the new dip
    assert flags(detector, {**fast, "worker:2": 1.0}, 55.0) == [("worker:2", True)]


@pytest.mark.parametrize(("rates", "expected"), [
    ({"a": 1.0}, None),                       # alone: nothing to compare with
    ({"a": 0.0, "b": 0.0}, None),             # nobody moves: no straggler
    ({"a": 4.9, "b": 10.0}, "a"),             # two tasks: each against the other
    ({"a": 5.0, "b": 10.0}, None),            # exactly the ratio is not below it
])
def test_who_is_flagged(rates: dict[str, float], expected: str | None) -> None:
    detector = StragglerDetector(ratio=0.5, window_s=1.0)
    detector.update(rates, 0.0)
    found = [c.task for c in detector.update(rates, 1.0) if c.straggling]
    assert found == ([] if expected is None else [expected])


def test_slowest() -> None:
    assert slowest({"a": 1.0}) is None
    assert slowest({"a": 3.0, "b": 1.0, "c": 3.0}) == "b"
    # lock-step tasks (MWMS) differ by noise: nobody is named
    assert slowest({"a": 10.0, "b": 9.98, "c": 10.01}) is None


def test_memory_high_against_a_limit_or_what_the_host_has_left() -> None:
    reading = MemoryReading(rss_bytes=300 * MIB, available_bytes=8000 * MIB, at=0.0)
    assert reading.high(0.5, 400 * MIB)
    assert not reading.high(0.5, None)  # 300 MiB of 8.3 GiB
    assert MemoryReading(300 * MIB, 10 * MIB, 0.0).high(0.9, None)  # the host is nearly out
    assert not MemoryReading(300 * MIB, None, 0.0).high(0.9, None)  # nothing known


def test_an_exit_with_a_memory_note_is_out_of_memory_and_without_one_is_not() -> None:
    killed = Exited(task="worker:1", ts=0.0, signal="SIGKILL")
    assert classify_exit(killed, restore_failed=None, reported_steps=True,
                         memory_note="likely OOM") == (FailureKind.OUT_OF_MEMORY, "likely OOM")
    assert classify_exit(killed, restore_failed=None, reported_steps=True) == (
        FailureKind.SIGNALLED, None)
    preempted = Exited(task="worker:1", ts=0.0, exit_code=143)
    assert classify_exit(preempted, restore_failed=None, reported_steps=True,
                         memory_note="x")[0] is FailureKind.PREEMPTED


# --- the watch, fed agent messages at scripted times ----------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.lines: list[str] = []


def watch(**health: Any) -> tuple[TaskHealthWatch, Recorder]:
    seen = Recorder()
    spec = HealthSpec(**{"straggler_window_s": 10.0, **health})
    return TaskHealthWatch(spec, emit=seen.events.append, warn=seen.lines.append,
                           interval_s=1.0), seen


def test_the_watch_flags_the_slow_task_within_the_window() -> None:
    health, seen = watch()
    for task in ("worker:0", "worker:1", "worker:2"):
        health.observe(0, "localhost", Started(task=task, pid=1, ts=0.0), 0.0)
    steps = {"worker:0": 0, "worker:1": 0, "worker:2": 0}
    flagged_at = None
    for tenth in range(1, 300):
        now = tenth / 10
        for task, per_tick in (("worker:0", 1), ("worker:1", 1), ("worker:2", 0.2)):
            if per_tick >= 1 or tenth % 5 == 0:
                steps[task] += 1
                health.observe(0, "localhost", Progress(task=task, step=steps[task], ts=now), now)
        if flagged_at is None and any(isinstance(e, TaskStraggling) for e in seen.events):
            flagged_at = now
    assert flagged_at is not None and flagged_at <= 10.0 + 5.0 + 1.0  # window + rate window + tick
    (flag,) = [e for e in seen.events if isinstance(e, TaskStraggling)]
    assert (flag.task, flag.straggling) == ("worker:2", True)
    assert any("worker:2 is a straggler" in line for line in seen.lines)
    last = [e for e in seen.events if isinstance(e, JobHealth)][-1]
    assert (last.slowest, list(last.stragglers)) == ("worker:2", ["worker:2"])
    summary = health.summary()
    assert [s["task"] for s in summary["stragglers"]] == ["worker:2"]
    assert summary["slowest"] == "worker:2"


KILLED = Exited(task="worker:0", ts=0.0, signal="SIGKILL")


def heartbeat(rss_mib: int, available_mib: int = 8000) -> Heartbeat:
    return Heartbeat(ts=0.0, tasks={"worker:0": TaskUsage(pid=1, cpu_percent=99.0,
                                                          rss_bytes=rss_mib * MIB)},
                     available_bytes=available_mib * MIB)


def test_the_watch_warns_once_of_rising_memory_and_names_a_later_sigkill() -> None:
    health, seen = watch(memory_limit_mib=400, memory_warn_ratio=0.5)
    health.observe(0, "h", Started(task="worker:0", pid=1, ts=0.0), 0.0)
    for second, rss in enumerate((50, 150, 250, 300, 350)):
        health.observe(0, "h", heartbeat(rss), float(second))
    warnings = [e for e in seen.events if isinstance(e, TaskMemoryHigh)]
    assert [(w.task, w.rss_bytes // MIB, w.limit_bytes) for w in warnings] == [
        ("worker:0", 250, 400 * MIB)]
    assert sum("running out of memory" in line for line in seen.lines) == 1
    note = health.memory_note(KILLED)
    assert note is not None and "RSS 350 MiB of a 400 MiB limit" in note
    assert health.summary()["tasks"]["worker:0"]["peak_rss_bytes"] == 350 * MIB


def test_a_new_attempt_forgets_the_last_attempts_warning_and_rates() -> None:
    health, _ = watch(memory_limit_mib=400, memory_warn_ratio=0.5)
    health.observe(0, "h", heartbeat(300), 0.0)
    assert health.memory_note(KILLED) is not None
    health.observe(1, "h", Started(task="worker:0", pid=2, ts=0.0), 1.0)
    assert health.memory_note(KILLED) is None  # the last attempt's process is not this one
    health.observe(1, "h", heartbeat(20), 2.0)
    assert health.memory_note(KILLED) is None
    assert health.tasks["worker:0"].rate.step is None
