"""The job loop's side of a host pool (:class:`~launcher.plan.pool.HostPool`): which hosts each
attempt may use, and when the job should change size.

- After an attempt, a host whose agent was lost, or on which ``exclude_after_failures`` attempts
  in a row failed, is left out (``host_left_out``).
- Before a restart, the hosts the new placement brings in (spares, readmitted hosts) are probed
  through the engine; one that fails is left out too and the job placed again.
- Below ``min_workers`` the keeper waits up to ``wait_for_hosts_s``, probing the left-out hosts
  and readmitting those that answer (``host_readmitted``); then :class:`TooFewHosts`.
- While a job runs smaller than its spec, :class:`GrowWatch` probes the hosts left out for
  ``readmit_after_s``; one that answers is readmitted and the attempt stopped gracefully
  (:class:`~launcher.job.inbox.Resize`) to restart at full size, outside the restart budget.

Every attempt's placement is recorded (``attempt_placed``), a change of size too
(``job_resized``), each with one console line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from launcher.backends.engine import Backend
from launcher.job.hooks import TaskControl
from launcher.job.inbox import Clock, Interrupt, Resize
from launcher.output.console import Console
from launcher.plan.placement import PlacedHost, Placement
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.plan.pool import HostPool, TooFewHosts, workers_of
from launcher.run.events import Event
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.run.pool_events import AttemptPlaced, HostLeftOut, HostReadmitted, JobResized

#: While waiting for hosts (or for a left-out host to come back), how often each is probed.
PROBE_EVERY_S = 5.0

Wait = Callable[[float], Interrupt | None]


class HostsWaitInterrupted(Exception):
    """tfcluster was stopped while it waited for hosts."""

    def __init__(self, interrupt: Interrupt) -> None:
        super().__init__(interrupt.name)
        self.interrupt = interrupt


class PoolKeeper:
    """Keeps ``pool`` for one run: probes through ``backend``, says what it does on ``console``
    and in events (``emit``), reads time from ``clock``."""

    def __init__(self, pool: HostPool, backend: Backend, *, job: str, console: Console,
                 emit: Callable[[Event], None], clock: Clock) -> None:
        self.pool = pool
        self.backend = backend
        self.job = job
        self.console = console
        self.emit = emit
        self.clock = clock
        self.last: Placement | None = None
        self.placed: list[AttemptPlaced] = []  # every attempt's, for summary.json

    # --- probing -----------------------------------------------------------------------------

    def probe(self, hosts: Sequence[PlacedHost]) -> dict[str, str]:
        """The hosts that fail the engine's probe, with the problem (every host at once)."""
        if not hosts:
            return {}
        plan = LaunchPlan(job=self.job, attempt=0, run_dir="", checkpoint_dir=None, resume=None,
                          hosts=tuple(HostPlan(name=h.name, local=h.local, address=h.address,
                                               python=h.python, tasks=(), where=h.where)
                                      for h in hosts),
                          heartbeat_interval_s=1.0, grace_period_s=1.0)
        try:
            report = self.backend.probe(plan)
        except Exception as exc:
            return {h.name: f"probe failed: {exc}" for h in hosts}
        return {r.host: "; ".join(r.problems) for r in report.hosts if not r.ok}

    def _readmit_answering(self, hosts: Sequence[PlacedHost], now: float) -> list[str]:
        for host in hosts:
            self.pool.probed(host.name, now)
        failing = self.probe(hosts)
        back = [h.name for h in hosts if h.name not in failing]
        for name in back:
            self.pool.readmit(name)
            self.emit(HostReadmitted(host=name, reason="it answered its probe again"))
            self.console.say(f"host {name} is back (it answered its probe): usable again")
        return back

    # --- around attempts ---------------------------------------------------------------------

    def after_attempt(self, result: AttemptResult, back: Sequence[str] = (),
                      leave_out: Mapping[str, str] | None = None) -> None:
        """Leave out the hosts the attempt showed to be bad (from the next attempt on), and those
        a failure rule leaves out (``leave_out``: host -> why, ``exclude_host``); readmit
        ``back``, the hosts whose return stopped it (status ``resized``)."""
        if result.status is AttemptStatus.RESIZED:
            for name in back:
                self.pool.readmit(name)
                self.emit(HostReadmitted(host=name, reason="it answered its probe again"))
        now = self.clock()
        newly = self.pool.after_attempt(lost=result.lost_hosts, failed=result.failed_hosts,
                                        ran=set(result.placement.values()), now=now)
        for name, reason in (leave_out or {}).items():
            if name in self.pool.standing and self.pool.leave_out(name, reason, now):
                newly[name] = reason
        for name, reason in newly.items():
            self._left_out(result.attempt + 1, name, reason)

    def _left_out(self, attempt: int, name: str, reason: str) -> None:
        after = self.pool.rules.readmit_after_s
        self.emit(HostLeftOut(attempt=attempt, host=name, reason=reason, readmit_after_s=after))
        again = "" if after is None else f"; probed again after {after:g}s"
        self.console.warn(f"host {name} is left out: {reason}{again}")

    def place(self, attempt: int, wait: Wait) -> Placement:
        """The placement of ``attempt``: new hosts probed first, hosts waited for below the
        floor. Raises :class:`TooFewHosts` or :class:`HostsWaitInterrupted`."""
        now = self.clock()
        self._readmit_answering(self.pool.due_for_probe(now, every_s=PROBE_EVERY_S), now)
        while True:
            placement = self._placeable(wait)
            used = {h.name for h in self.last.hosts} if self.last is not None else None
            fresh = [h for h in placement.hosts if used is not None and h.name not in used]
            failing = self.probe(fresh)
            if not failing:
                break
            for name, problem in failing.items():
                if self.pool.leave_out(name, f"its probe failed: {problem}", self.clock()):
                    self._left_out(attempt, name, f"its probe failed: {problem}")
        self._record(attempt, placement)
        return placement

    def _placeable(self, wait: Wait) -> Placement:
        try:
            return self.pool.place()
        except TooFewHosts as short:
            if not self.pool.rules.wait_for_hosts_s:
                raise
            deadline = self.clock() + self.pool.rules.wait_for_hosts_s
            self.console.warn(f"{short}: waiting up to {self.pool.rules.wait_for_hosts_s:g}s "
                              "for hosts to come back")
        while True:
            now = self.clock()
            self._readmit_answering(self.pool.due_for_probe(now, waiting=True,
                                                            every_s=PROBE_EVERY_S), now)
            try:
                return self.pool.place()
            except TooFewHosts as short:
                if now >= deadline:
                    raise short from None
            interrupt = wait(min(PROBE_EVERY_S, max(0.0, deadline - now)))
            if interrupt is not None:
                raise HostsWaitInterrupted(interrupt)

    def _record(self, attempt: int, placement: Placement) -> None:
        workers, full = workers_of(placement), self.pool.max_workers
        spares, left_out = self.pool.spares(placement), self.pool.left_out
        placed = AttemptPlaced(attempt=attempt, workers=workers, max_workers=full,
                               placement={str(t.task): t.host for t in placement.tasks},
                               spares=spares, left_out=left_out)
        self.placed.append(placed)
        self.emit(placed)
        before = None if self.last is None else workers_of(self.last)
        if before is not None and before != workers:
            why = "hosts came back" if workers > before else \
                f"no spare for {', '.join(sorted(left_out))}"
            self.emit(JobResized(attempt=attempt, workers=workers, previous_workers=before,
                                 max_workers=full, reason=why))
            self.console.warn(f"attempt {attempt} runs {workers} of {full} workers "
                              f"(was {before}): {why}")
        elif self.last is not None:
            moved = sorted({h.name for h in placement.hosts} - {h.name for h in self.last.hosts})
            if moved:
                self.console.say(f"attempt {attempt} uses spare host(s) {', '.join(moved)}")
        self.last = placement

    def summary(self) -> dict[str, Any]:
        """The ``pool`` section of ``summary.json``: the pool, each attempt's placement, and the
        hosts left out at the end, with why."""
        return {"pool": {"hosts": [h.name for h in self.pool.hosts],
                         "attempts": [p.record() for p in self.placed],
                         "left_out": self.pool.left_out}}


class GrowWatch:
    """A hook on the running attempt: while the job runs smaller than its spec, probe the hosts
    left out for ``readmit_after_s`` (in a thread: ``spawn``); one that answers stops the attempt
    gracefully through ``put`` so that the job restarts at full size."""

    def __init__(self, keeper: PoolKeeper, put: Callable[[Resize], None],
                 spawn: Callable[[Callable[[], None]], None]) -> None:
        self.keeper = keeper
        self.put = put
        self.spawn = spawn
        self.probing = False
        #: The hosts found back, whose return stopped the attempt.
        self.back: tuple[str, ...] = ()

    def on_progress(self, control: TaskControl, task: str, step: int) -> None:
        """Nothing to do per step."""

    def on_exited(self, control: TaskControl, task: str) -> None:
        """Nothing to do when a task exits."""

    def on_tick(self, control: TaskControl, now: float) -> float:
        pool, last = self.keeper.pool, self.keeper.last
        if last is None or not pool.can_grow(last) or self.probing:
            return now + PROBE_EVERY_S
        due = pool.due_for_probe(now, every_s=PROBE_EVERY_S)
        if due:
            for host in due:
                pool.probed(host.name, now)
            self.probing = True
            self.spawn(lambda: self._probe(due))
            return now + PROBE_EVERY_S
        times = [t for h in pool.left_out if (t := pool.readmit_due_at(h)) is not None]
        return max(now + 0.1, min(times)) if times else now + PROBE_EVERY_S * 12

    def _probe(self, hosts: Sequence[PlacedHost]) -> None:
        try:
            failing = self.keeper.probe(hosts)
            back = tuple(h.name for h in hosts if h.name not in failing)
            if back:
                self.back = back
                self.put(Resize(f"host(s) {', '.join(back)} answered their probe again: "
                                "restarting the job at full size", back))
        finally:
            self.probing = False
