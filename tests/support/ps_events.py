"""Scripted ``events.jsonl`` contents of a parameter_server job (chief:0, worker:0, worker:1, ps:0,
one attempt) hurt by one fault, as the drill's PS tests read them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Event = dict[str, Any]
CHIEF = "chief:0"
PIDS = {"chief:0": 11, "worker:0": 21, "worker:1": 22, "ps:0": 31}


def ev(ts: float, event: str, **fields: Any) -> Event:
    return {"ts": ts, "event": event, **fields}


def started(ts: float, task: str, pid: int | None = None) -> Event:
    return ev(ts, "task_started", attempt=0, task=task, host="h", pid=pid or PIDS[task],
              log=f"/r/attempt-0/{task.replace(':', '-')}.log", warm=False, cold_reason=None)


def progress(ts: float, step: int, first: bool = False) -> Event:
    return ev(ts, "task_progress", attempt=0, task=CHIEF, step=step, metrics={}, first=first)


def injected(ts: float, task: str, step: int, action: str = "kill") -> Event:
    return ev(ts, "fault_injected", attempt=0, fault=f"{action}:{task}:after=2", action=action,
              trigger="after=2", task=task, tasks=[task], host="h", signal="SIGKILL", step=step,
              detail="", sent_at=ts)


def failed(ts: float, task: str) -> Event:
    return ev(ts, "task_failed", attempt=0, task=task, host="h", kind="signalled",
              died_at=ts, observed_at=ts, signal="SIGKILL")


def restarted(ts: float, task: str, together: Sequence[str] = (),
              resume_step: int | None = None) -> Event:
    return ev(ts, "task_restarted", attempt=0, task=task, host="h", reason="restarting",
              restarts=1, backoff_s=0.5, together=list(together), resume_step=resume_step)


def stopped(ts: float, task: str) -> Event:
    return ev(ts, "task_exited", attempt=0, task=task, host="h", exit_code=None,
              signal="SIGTERM", stopped=True)


def run(*middle: Event) -> list[Event]:
    """The job from its start to the chief's step 10, ``middle``, then the chief finishing at
    step 60 and the servers stopped."""
    return [
        ev(0.0, "job_started", job="ps", tasks=list(PIDS), hosts=["h"]),
        ev(0.05, "attempt_started", attempt=0, resume_step=None),
        *(started(0.1, task) for task in PIDS),
        progress(0.5, 1, first=True), progress(1.5, 10),
        *middle,
        progress(5.5, 55),
        ev(6.0, "task_exited", attempt=0, task=CHIEF, host="h", exit_code=0, signal=None,
           stopped=False),
        ev(6.0, "chief_finished", attempt=0, stopping=["worker:0", "worker:1", "ps:0"]),
        *(stopped(6.1, task) for task in ("worker:0", "worker:1", "ps:0")),
        ev(6.2, "job_succeeded", job="ps", attempts=1),
    ]


def worker_kill(*, chief_again: bool = False) -> list[Event]:
    """worker:1 killed at step 19, restarted alone 0.5 s later; with ``chief_again`` the chief is
    started again too (pid 12), which it must not be."""
    extra = [failed(2.3, CHIEF), started(2.6, CHIEF, 12)] if chief_again else []
    return run(injected(2.0, "worker:1", 19), failed(2.004, "worker:1"),
               restarted(2.005, "worker:1"), progress(2.2, 21), *extra,
               started(2.5, "worker:1", 23), progress(3.2, 31))


def ps_kill(*, together: Sequence[str] = (CHIEF,), resume_step: int | None = 20) -> list[Event]:
    """ps:0 killed at step 20; the chief stopped 8 ms after the detection; both back at 2.5 s;
    the chief's first step at 2.7 s."""
    chief = [stopped(2.010, CHIEF)] if CHIEF in together else []
    back = [started(2.5, CHIEF, 12), progress(2.7, (resume_step or 0) + 1, first=True)] \
        if CHIEF in together else []
    return run(injected(2.0, "ps:0", 20), failed(2.002, "ps:0"),
               restarted(2.003, "ps:0", together, resume_step), *chief,
               started(2.5, "ps:0", 32), *back, progress(3.7, 31))


def chief_kill(*, resume_step: int | None = 20) -> list[Event]:
    """chief:0 killed at step 25, restarted alone from ``resume_step``, training again at 2.6 s."""
    return run(injected(2.0, CHIEF, 25), failed(2.003, CHIEF),
               restarted(2.004, CHIEF, (), resume_step), started(2.5, CHIEF, 12),
               progress(2.6, (resume_step or 0) + 1, first=True), progress(3.6, 31))
