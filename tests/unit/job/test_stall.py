"""The coordinator's own stops (Ctrl-Z then ``fg``) are nobody else's silence: the time it did not
run is measured by :class:`StallWatch` and every health deadline moves on by as much."""

from __future__ import annotations

from launcher.job.health import HealthMonitor
from launcher.job.stall import STALL_MARGIN_S, StallWatch
from launcher.run.failures import FailureKind
from launcher.spec.health import HealthSpec


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_gap_beyond_the_loops_longest_sleep_is_a_stall_and_a_usual_one_is_not() -> None:
    ticks = Ticks()
    watch = StallWatch(1.0, monotonic=ticks)
    assert watch.gap() == 0.0  # the first look
    ticks.now += 1.0 + STALL_MARGIN_S
    assert watch.gap() == 0.0
    ticks.now += 40.0
    assert watch.gap() == 39.0
    ticks.now += 0.5
    assert watch.gap() == 0.0


def test_a_stall_moves_every_deadline_on_so_no_host_is_lost_nor_task_hung_for_it() -> None:
    health = HealthMonitor(HealthSpec(heartbeat_timeout_s=10, hang_timeout_s=20), now=0.0)
    health.host_seen("a", 0.0)
    health.task_started("worker:0", "a", 0.0)
    health.progress("worker:0", 1, 5.0)
    # stopped from t=6 to t=60: the coordinator runs again and looks before any message is read
    assert health.check(60.0, stalled_s=54.0) == []
    assert [i.kind for i in health.check(64.1)] == [FailureKind.LOST_HOST]  # 10s of its own
    assert [i.kind for i in health.check(79.1)] == [FailureKind.LOST_HOST, FailureKind.HUNG]


def test_without_a_stall_the_same_silence_is_a_lost_host() -> None:
    health = HealthMonitor(HealthSpec(heartbeat_timeout_s=10), now=0.0)
    health.host_seen("a", 0.0)
    assert [i.kind for i in health.check(60.0)] == [FailureKind.LOST_HOST]
