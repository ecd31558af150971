"""Memory of a task against what its host can give it: the warning before it runs out, the kill at
``health.memory_limit_mib``, and, when it died, whether it ran out of memory.

The agent's heartbeat carries each task's RSS and the memory its host still has available
(:mod:`worker.agent.host_memory`: psutil's ``available``, or less if a cgroup limit is closer). A
task's *limit* is ``health.memory_limit_mib`` when set, else its RSS plus what is available (what it
could still grow into). It is *high* when its RSS passes ``health.memory_warn_ratio`` of that limit.

A task **ran out of memory** (:func:`out_of_memory`) when:

- the kernel's OOM killer killed it (the agent saw the kernel's OOM kill count rise with its SIGKILL:
  :mod:`worker.agent.oom_evidence`), its memory cgroup's limit or the host's memory;
- tfcluster killed it for passing ``health.memory_limit_mib``;
- its traceback or last stderr lines say so: TensorFlow's ``ResourceExhaustedError`` / ``OOM when
  allocating``, Python's ``MemoryError``;
- or, less surely, a SIGKILL tfcluster did not send came while its memory was high ("likely").

Each is said with the peak RSS and the three remedies the README's "Out of memory" section shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from worker.wire.protocol import Exited

MIB = 1024 * 1024
#: Less than this fraction of the limit still available counts as high whatever the ratio.
NEARLY_OUT_FRACTION = 0.05

OOM_ADVICE = ("use a smaller per-replica batch size, mixed precision "
              "(tf.keras.mixed_precision.set_global_policy('mixed_float16')), or gradient "
              "accumulation (worker.accumulation) / recomputation (tf.recompute_grad); "
              "see \"Out of memory\" under Troubleshooting in the docs "
              "(docs/guides/troubleshooting.md)")

#: What TensorFlow and Python write when an allocation fails.
_RAN_OUT = re.compile(r"ResourceExhaustedError|OOM when allocating|\bMemoryError\b")
#: Where TensorFlow's "OOM when allocating tensor ..." goes on to name devices and allocators.
_ALLOCATOR = re.compile(r" on /job:| by allocator |\[Op:")
#: A quoted error is cut at this many characters.
_QUOTED_CHARS = 200


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


def limit_kill_text(task: str, reading: MemoryReading, limit_bytes: int) -> str:
    return (f"{task} passed health.memory_limit_mib ({reading.describe(limit_bytes)}): "
            "stopping it (SIGKILL)")


def ran_out_in(traceback: str | None, stderr_tail: Sequence[str]) -> str | None:
    """What in a traceback (or, without one, in the last stderr lines) says an allocation failed,
    in a few words: ``ResourceExhaustedError: OOM when allocating tensor with shape[...] and type
    float`` (TensorFlow's device and op names left out), ``MemoryError``."""
    lines = traceback.splitlines() if traceback else list(stderr_tail)
    for line in reversed(lines):
        if _RAN_OUT.search(line):
            return _short(line.strip())
    return None


def _short(line: str) -> str:
    name = line.split(":", 1)[0].rsplit(".", 1)[-1] if ":" in line else ""
    if (start := line.find("OOM when allocating")) >= 0:
        what = _ALLOCATOR.split(line[start:], 1)[0]
        return f"{name}: {what}" if name and " " not in name else what
    if name and " " not in name:
        return f"{name}:{line.split(':', 1)[1]}"[:_QUOTED_CHARS].rstrip(": ")
    return line[:_QUOTED_CHARS]


@dataclass(frozen=True)
class MemoryPast:
    """What the coordinator knew of a task's memory when it died."""

    reading: MemoryReading | None
    peak_rss_bytes: int
    warned: bool
    #: tfcluster killed it for passing ``memory_limit_mib`` (the reading it was killed at).
    killed_at: MemoryReading | None = None


def _peak(message: Exited, past: MemoryPast) -> str:
    peak = max(message.peak_rss_bytes or 0, past.peak_rss_bytes)
    return f"peak RSS {mib(peak)}" if peak else "peak RSS unknown"


def out_of_memory(message: Exited, past: MemoryPast, *, ratio: float,
                  limit_bytes: int | None) -> str | None:
    """What to say of a task that died (``message``) if it ran out of memory, else None."""
    peak = _peak(message, past)
    if message.signal == "SIGKILL":
        if past.killed_at is not None and limit_bytes is not None:
            return (f"ran out of memory: stopped by tfcluster, its RSS passed "
                    f"health.memory_limit_mib ({mib(limit_bytes)}; {peak}); {OOM_ADVICE}")
        if message.oom_killed:
            where = "its host's memory" if message.memory_limit_bytes is None else \
                f"its memory cgroup's {mib(message.memory_limit_bytes)} limit"
            return (f"ran out of memory: killed by the kernel's out-of-memory killer "
                    f"({where}; {peak}); {OOM_ADVICE}")
        if past.reading is not None and (past.warned or past.reading.high(ratio, limit_bytes)):
            return (f"likely killed for running out of memory (last "
                    f"{past.reading.describe(limit_bytes)}; {peak}); {OOM_ADVICE}")
        return None
    if (line := ran_out_in(message.traceback, message.stderr_tail)) is not None:
        return f"ran out of memory: {line} ({peak}); {OOM_ADVICE}"
    return None
