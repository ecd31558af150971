"""Placing a job from a pool of hosts, attempt after attempt (the spec's ``placement:``).

:class:`HostPool` keeps each pool host's standing across the attempts of one run: usable, or left
out (its agent was lost, its probe failed, or ``exclude_after_failures`` attempts in a row failed
on it) since when and why. :meth:`HostPool.place` puts the spec's tasks on the usable hosts in
pool order, ``tasks_per_host`` each: the chief first, then as many workers as fit (never fewer
training tasks than ``min_workers``), then the evaluator if a slot is left. Task ``k`` of the
spec's order listens on ``port + k`` wherever it runs. Nothing here reads a clock or does I/O: the
coordinator says when things happened, and probes hosts through the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from launcher.errors import TfclusterError
from launcher.plan.placement import PastAttempt, PlacedHost, PlacedTask, Placement
from launcher.spec.model import ClusterSpec
from launcher.spec.placement import PlacementSpec
from worker.wire.tfconfig import EVALUATOR, TaskId, task_order


class TooFewHosts(TfclusterError):
    """Fewer usable hosts than the smallest attempt needs; ``missing``: each left-out host and
    why."""

    def __init__(self, need: int, usable: Sequence[str], missing: Mapping[str, str]) -> None:
        self.need, self.usable, self.missing = need, tuple(usable), dict(missing)
        why = "; ".join(f"{host}: {reason}" for host, reason in self.missing.items())
        super().__init__(f"too few usable hosts: {len(self.usable)} of the {need} the job needs "
                         f"at its smallest" + (f" ({why})" if why else ""))


@dataclass
class Standing:
    """One pool host across the attempts of a run."""

    #: Attempts in a row in which a task failed on it (its own failure, not a survivor's).
    failed_in_a_row: int = 0
    #: Left out since (the coordinator's clock), and why; None: usable.
    left_out_at: float | None = None
    reason: str = ""
    #: When it was last probed while left out.
    probed_at: float | None = None


def training_order(spec: ClusterSpec) -> list[TaskId]:
    """Every task of the spec, chief first (then workers, then the evaluator)."""
    return sorted((slot.task for slot in spec.task_slots()), key=task_order)


class HostPool:
    """The standing of ``hosts`` (the engine's pool, in order) for ``spec``'s placement."""

    def __init__(self, spec: ClusterSpec, hosts: Sequence[PlacedHost]) -> None:
        if spec.pool is None:
            raise TfclusterError("this spec places no tasks from a pool")
        self.spec = spec
        self.rules: PlacementSpec = spec.pool
        self.hosts = tuple(hosts)
        self.standing = {host.name: Standing() for host in self.hosts}
        self.order = training_order(spec)
        self.max_workers = sum(1 for t in self.order if t.type != EVALUATOR)
        self.min_workers = self.rules.min_workers or self.max_workers

    # --- placing -----------------------------------------------------------------------------

    @property
    def usable(self) -> list[str]:
        return [h.name for h in self.hosts if self.standing[h.name].left_out_at is None]

    @property
    def left_out(self) -> dict[str, str]:
        return {name: s.reason for name, s in self.standing.items() if s.left_out_at is not None}

    def hosts_for(self, tasks: int) -> int:
        return -(-tasks // self.rules.tasks_per_host)

    def place(self, spec: ClusterSpec | None = None,
              history: Sequence[PastAttempt] = ()) -> Placement:
        """The next attempt on the usable hosts (a :data:`~launcher.plan.planner.Place`).
        Raises :class:`TooFewHosts` below ``min_workers``."""
        usable = self.usable
        slots = len(usable) * self.rules.tasks_per_host
        if slots < self.min_workers:
            raise TooFewHosts(self.hosts_for(self.min_workers), usable, self.left_out)
        workers = min(self.max_workers, slots)
        chosen = [t for t in self.order if t.type != EVALUATOR][:workers]
        chosen += [t for t in self.order if t.type == EVALUATOR][:slots - workers]
        chosen.sort(key=task_order)
        used = usable[:self.hosts_for(len(chosen))]
        port_of = {task: self.rules.port + k for k, task in enumerate(self.order)}
        per_host = self.rules.tasks_per_host
        by_name = {h.name: h for h in self.hosts}
        return Placement(
            hosts=tuple(by_name[name] for name in used),
            tasks=tuple(PlacedTask(task, used[k // per_host], port_of[task])
                        for k, task in enumerate(chosen)))

    def spares(self, placement: Placement) -> list[str]:
        """Usable hosts ``placement`` does not use."""
        used = {h.name for h in placement.hosts}
        return [name for name in self.usable if name not in used]

    # --- standing ----------------------------------------------------------------------------

    def after_attempt(self, *, lost: Iterable[str], failed: Iterable[str], ran: Iterable[str],
                      now: float) -> dict[str, str]:
        """Record an attempt that ran on ``ran``: its agents ``lost``, the hosts where a task
        ``failed`` first. Returns the hosts newly left out, with why."""
        lost, failed = set(lost), set(failed)
        newly: dict[str, str] = {}
        for name in ran:
            standing = self.standing.get(name)
            if standing is None:
                continue
            if name in failed or name in lost:
                standing.failed_in_a_row += 1
            else:
                standing.failed_in_a_row = 0
            if name in lost:
                reason = "its agent was lost"
            elif standing.failed_in_a_row >= self.rules.exclude_after_failures:
                reason = f"{standing.failed_in_a_row} attempts in a row failed on it"
            else:
                continue
            if self.leave_out(name, reason, now):
                newly[name] = reason
        return newly

    def leave_out(self, name: str, reason: str, now: float) -> bool:
        """Leave ``name`` out from now on; False if it already was."""
        standing = self.standing[name]
        if standing.left_out_at is not None:
            return False
        standing.left_out_at, standing.reason, standing.probed_at = now, reason, now
        return True

    def readmit(self, name: str) -> None:
        self.standing[name] = Standing()

    def due_for_probe(self, now: float, *, waiting: bool = False,
                      every_s: float = 5.0) -> list[PlacedHost]:
        """Left-out hosts to probe now: those out for ``readmit_after_s`` (any left out when the
        job is ``waiting`` for hosts), each at most every ``every_s``."""
        after = self.rules.readmit_after_s
        due = []
        for host in self.hosts:
            standing = self.standing[host.name]
            if standing.left_out_at is None:
                continue
            if not waiting and (after is None or now < standing.left_out_at + after):
                continue
            probed = standing.probed_at
            if probed is not None and probed > standing.left_out_at and now - probed < every_s:
                continue
            due.append(host)
        return due

    def probed(self, name: str, now: float) -> None:
        self.standing[name].probed_at = now

    def readmit_due_at(self, name: str) -> float | None:
        standing = self.standing[name]
        if standing.left_out_at is None or self.rules.readmit_after_s is None:
            return None
        return standing.left_out_at + self.rules.readmit_after_s

    def can_grow(self, placement: Placement) -> bool:
        """Whether a job running as ``placement`` is smaller than the spec (so a host coming
        back is worth a restart)."""
        return workers_of(placement) < self.max_workers


def workers_of(placement: Placement) -> int:
    """Training tasks (chief and workers) an attempt placed as ``placement`` runs."""
    return sum(1 for t in placement.tasks if t.task.type != EVALUATOR)

