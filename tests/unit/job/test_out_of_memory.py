"""Out of memory, named: each way a task runs out of memory (the kernel's OOM killer, tfcluster's
own kill at ``health.memory_limit_mib``, TensorFlow's ResourceExhaustedError, a SIGKILL while its
memory was high) is said as such with its peak RSS and the three remedies; nothing else is."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.job.memory import MIB, MemoryPast, MemoryReading, out_of_memory
from launcher.job.task_health import TaskHealthWatch
from launcher.run.failures import FailureKind, TaskFailure
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Exited, Heartbeat, Started, TaskUsage

TF_TRACEBACK = (
    "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
    "__wrapped__Fill}} OOM when allocating tensor with shape[1099511627776] and type float")
HIGH = MemoryReading(390 * MIB, 5 * MIB, 0.0)
LOW = MemoryReading(30 * MIB, 8000 * MIB, 0.0)
NOTHING = MemoryPast(reading=None, peak_rss_bytes=0, warned=False)


def exited(**fields: Any) -> Exited:
    return Exited(task="worker:1", ts=0.0, **fields)


@pytest.mark.parametrize(("message", "past", "limit", "says"), [
    # the kernel's OOM killer, inside a memory cgroup: its limit and the peak RSS (from the agent)
    (exited(signal="SIGKILL", oom_killed=True, memory_limit_bytes=200 * MIB,
            peak_rss_bytes=199 * MIB), NOTHING, None,
     "ran out of memory: killed by the kernel's out-of-memory killer (its memory cgroup's "
     "200 MiB limit; peak RSS 199 MiB)"),
    # ... the host's memory: the larger of the agent's and the heartbeats' peaks
    (exited(signal="SIGKILL", oom_killed=True, peak_rss_bytes=100 * MIB),
     MemoryPast(LOW, 120 * MIB, False), None,
     "killed by the kernel's out-of-memory killer (its host's memory; peak RSS 120 MiB)"),
    # tfcluster killed it at memory_limit_mib
    (exited(signal="SIGKILL", peak_rss_bytes=410 * MIB),
     MemoryPast(HIGH, 410 * MIB, True, killed_at=HIGH), 400 * MIB,
     "ran out of memory: stopped by tfcluster, its RSS passed health.memory_limit_mib "
     "(400 MiB; peak RSS 410 MiB)"),
    # a SIGKILL while memory was high, no word from the kernel: likely
    (exited(signal="SIGKILL", oom_killed=False), MemoryPast(HIGH, 390 * MIB, False), None,
     "likely killed for running out of memory (last RSS 390 MiB with 5 MiB left on its host"),
    # TensorFlow's ResourceExhaustedError in the traceback
    (exited(exit_code=1, traceback=TF_TRACEBACK, peak_rss_bytes=64 * MIB), NOTHING, None,
     "ran out of memory: ResourceExhaustedError: OOM when allocating tensor with "
     "shape[1099511627776] and type float (peak RSS 64 MiB)"),
    # Python's MemoryError, in the stderr tail of a script that printed its own traceback
    (exited(exit_code=1, stderr_tail=["x = [0] * 10**12", "MemoryError"]), NOTHING, None,
     "ran out of memory: MemoryError (peak RSS unknown)"),
])
def test_each_way_of_running_out_is_named_with_its_peak_and_the_remedies(
        message: Exited, past: MemoryPast, limit: int | None, says: str) -> None:
    note = out_of_memory(message, past, ratio=0.9, limit_bytes=limit)
    assert note is not None and says in note
    for remedy in ("smaller per-replica batch size", "mixed_float16", "gradient accumulation",
                   "Out of memory\" under Troubleshooting"):
        assert remedy in note


@pytest.mark.parametrize("message", [
    exited(signal="SIGKILL", oom_killed=False),           # killed by someone, memory low
    exited(signal="SIGKILL"),                              # the kernel could not say
    exited(signal="SIGTERM", oom_killed=None),
    exited(exit_code=1, traceback="ValueError: bad shape"),
    exited(exit_code=1, stderr_tail=["Epoch 3: loss 0.1"]),
])
def test_other_deaths_are_not_called_out_of_memory(message: Exited) -> None:
    assert out_of_memory(message, MemoryPast(LOW, 30 * MIB, False), ratio=0.9,
                         limit_bytes=None) is None


def test_the_headline_of_an_oom_kill_says_out_of_memory_not_the_signal() -> None:
    note = out_of_memory(exited(signal="SIGKILL", oom_killed=True, peak_rss_bytes=5 * MIB),
                         NOTHING, ratio=0.9, limit_bytes=None)
    failure = TaskFailure(task="worker:1", host="h2", attempt=0, kind=FailureKind.OUT_OF_MEMORY,
                          died_at=0.0, observed_at=0.0, signal="SIGKILL", message=note)
    assert failure.headline().startswith(
        "worker:1 on h2 (attempt 0) ran out of memory: killed by the kernel's out-of-memory")
    assert failure.job_exit_code == 137


def test_a_task_past_memory_limit_mib_is_to_be_killed_once_and_named() -> None:
    lines: list[str] = []
    watch = TaskHealthWatch(HealthSpec(memory_limit_mib=400), emit=lambda _e: None,
                            warn=lines.append)
    watch.observe(0, "h", Started(task="worker:0", pid=1, ts=0.0), 0.0)
    for second, rss in enumerate((100, 390, 420, 450)):
        usage = TaskUsage(pid=1, cpu_percent=50.0, rss_bytes=rss * MIB)
        watch.observe(0, "h", Heartbeat(ts=0.0, tasks={"worker:0": usage}), float(second))
        assert watch.over_memory_limit() == (["worker:0"] if rss == 420 else [])
    assert any("worker:0 passed health.memory_limit_mib (RSS 420 MiB of a 400 MiB limit)" in line
               for line in lines)
    note = watch.memory_note(Exited(task="worker:0", ts=0.0, signal="SIGKILL"))
    assert note is not None and "stopped by tfcluster" in note and "peak RSS 450 MiB" in note
    # its restart is a new process: not killed again for the old one's memory
    watch.observe(1, "h", Started(task="worker:0", pid=2, ts=0.0), 5.0)
    assert watch.memory_note(Exited(task="worker:0", ts=0.0, signal="SIGKILL")) is None
