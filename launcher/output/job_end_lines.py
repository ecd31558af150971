"""Lines held until the console knows how the job ended: what MWMS tasks print when the
coordination service's leader has exited (:func:`launcher.run.noise.is_leader_gone`).

At the end of a job that succeeded, the chief (or worker 0) exits first and takes the coordination
service with it; a task still shutting down then logs ``E0000 ... BaseCollectiveExecutor::StartAbort
UNAVAILABLE: Failed to send RPC to coordination service ... Connection refused``, three lines that
look like a failure and are none. When a job fails, the same lines can be evidence. So
:class:`JobEndLines` keeps them aside, per task, in order:

- a later ordinary line of the same task shows them first (they were not its last words);
- a failure shows them (:meth:`JobEndLines.release`), before the calm console decides what of
  the survivors' output to withdraw;
- a success drops them (:meth:`JobEndLines.drop`), counted with the TF noise the console says it
  left out. The task logs keep every line either way.

Thread-safe: lines come from each agent's reader thread, the job's end from the job loop.
"""

from __future__ import annotations

import threading

from launcher.run.noise import continues_leader_gone, is_leader_gone


class JobEndLines:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, list[str]] = {}
        self._succeeded = False
        #: Lines dropped since the job succeeded, not yet counted by the console.
        self._dropped = 0

    @property
    def succeeded(self) -> bool:
        """:meth:`drop` was called, and no :meth:`release` since."""
        return self._succeeded

    def take(self, task: str, line: str) -> list[str]:
        """The lines of ``task`` to show now, in order: none if ``line`` is kept aside, else the
        ones kept before it, then ``line``."""
        with self._lock:
            kept = self._kept.get(task)
            if is_leader_gone(line) or (kept and continues_leader_gone(line)):
                if self._succeeded:
                    self._dropped += 1
                else:
                    self._kept.setdefault(task, []).append(line)
                return []
            if kept:
                del self._kept[task]
                return [*kept, line]
            return [line]

    def release(self) -> list[tuple[str, str]]:
        """Every line kept aside, as (task, line) in each task's order: the job failed, or a task
        did, so they may tell why."""
        with self._lock:
            kept, self._kept = self._kept, {}
            self._succeeded = False
        return [(task, line) for task, lines in kept.items() for line in lines]

    def drop(self) -> int:
        """The job succeeded: forget what is kept aside, and what comes later; how many lines
        were dropped since the last call."""
        with self._lock:
            count = self._dropped + sum(len(lines) for lines in self._kept.values())
            self._kept.clear()
            self._succeeded = True
            self._dropped = 0
        return count
