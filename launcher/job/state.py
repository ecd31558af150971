"""The state of the whole job. Tasks of a job change state as a unit: one failing task stops all.

::

    PENDING --> STARTING --> RUNNING --> SUCCEEDED
       |           |   |        |            ^  ^
       |           |   +--------|------------+  |  (every task exited before all had started)
       |           +------------+--> STOPPING --+  (parameter_server: the chief exited 0)
       |                                 |
       |                                 +--> RESTARTING --> STARTING (next attempt)
       |                                 |            |
       +---------------------------------+------------+--> FAILED

- PENDING: nothing started yet.
- STARTING: agents are being started and tasks launched; no task has reported a step yet.
- RUNNING: at least one task reported progress (or every task started).
- STOPPING: a task failed, a host was lost, or tfcluster was interrupted: every task is being torn
  down (TERM, grace period, KILL of whole trees) and the teardown is verified. A
  parameter_server job also stops its servers this way once its chief exited 0 (-> SUCCEEDED).
- RESTARTING: the policy chose to restart; waiting out the backoff.
- SUCCEEDED / FAILED: final.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.FAILED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.STOPPING, JobState.SUCCEEDED}),
    JobState.RUNNING: frozenset({JobState.STOPPING, JobState.SUCCEEDED}),
    JobState.STOPPING: frozenset({JobState.RESTARTING, JobState.FAILED, JobState.SUCCEEDED}),
    JobState.RESTARTING: frozenset({JobState.STARTING, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
}


class IllegalTransitionError(RuntimeError):
    def __init__(self, current: JobState, wanted: JobState) -> None:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none (final)"
        super().__init__(f"job cannot go from {current.value} to {wanted.value}; "
                         f"allowed: {allowed}")


class JobStateMachine:
    def __init__(self) -> None:
        self.state = JobState.PENDING

    def to(self, wanted: JobState) -> None:
        if wanted not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(self.state, wanted)
        self.state = wanted
