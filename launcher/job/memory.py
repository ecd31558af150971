"""Memory of a task against what its host can give it: the warning before it runs out, and the
likely out-of-memory kill afterwards.

The agent's heartbeat carries each task's RSS and the memory its host still has available
(:mod:`worker.agent.host_memory`: psutil's ``available``, or less if a cgroup limit is closer). A task's
*limit* is ``health.memory_limit_mib`` when set, else its RSS plus what is available (what it could
still grow into). It is *high* when its RSS passes ``health.memory_warn_ratio`` of that limit. A task
killed by a SIGKILL that tfcluster did not send while its memory was high is most likely the kernel's
OOM killer's (or the container's) victim, and the report says what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
#: Less than this fraction of the limit still available counts as high whatever the ratio.
NEARLY_OUT_FRACTION = 0.05

OOM_ADVICE = ("use a smaller per-task batch size, mixed precision "
              "(tf.keras.mixed_precision.set_global_policy('mixed_float16')), "
              "or fewer tasks per host")


def mib(size: int) -> str:
    return f"{size / MIB:.0f} MiB"


@dataclass(frozen=True)
class MemoryReading:
    """One heartbeat's view of a task's memory."""

    rss_bytes: int
    #: What the task's host still had available (None: the agent could not tell).
    available_bytes: int | None
    at: float

    def limit(self, limit_bytes: int | None) -> int | None:
        if limit_bytes is not None:
            return limit_bytes
        return None if self.available_bytes is None else self.rss_bytes + self.available_bytes

    def high(self, ratio: float, limit_bytes: int | None) -> bool:
        limit = self.limit(limit_bytes)
        if limit is None or limit <= 0:
            return False
        nearly_out = (self.available_bytes is not None
                      and self.available_bytes < NEARLY_OUT_FRACTION * (self.rss_bytes
                                                                        + self.available_bytes))
        return self.rss_bytes >= ratio * limit or nearly_out

    def describe(self, limit_bytes: int | None) -> str:
        limit = self.limit(limit_bytes)
        text = f"RSS {mib(self.rss_bytes)}"
        if limit is not None:
            text += f" of a {mib(limit)} limit" if limit_bytes is not None \
                else f" with {mib(limit - self.rss_bytes)} left on its host"
        return text


def warning_text(task: str, reading: MemoryReading, limit_bytes: int | None) -> str:
    return (f"{task} is running out of memory ({reading.describe(limit_bytes)}); "
            f"if it is killed: {OOM_ADVICE}")


def oom_note(reading: MemoryReading | None, *, ratio: float, limit_bytes: int | None,
             warned: bool) -> str | None:
    """What to say of a task killed by a SIGKILL tfcluster did not send: a likely out-of-memory
    kill when its last reading was high (or it was warned about), else nothing."""
    if reading is None or not (warned or reading.high(ratio, limit_bytes)):
        return None
    return (f"likely killed for running out of memory (last {reading.describe(limit_bytes)}); "
            f"{OOM_ADVICE}")
