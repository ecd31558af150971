"""A run on a Slurm allocation, around its job loop (:class:`SlurmSession`).

- ``SIGUSR1`` (``sbatch --signal=B:USR1@GRACE``: the time limit is near) stops the job like
  SIGTERM: every task gets SIGTERM and its grace period to save;
- each attempt records a ``slurm_attempt`` event: which Slurm job it is (``SLURM_JOB_ID``,
  ``SLURM_RESTART_COUNT``: how often Slurm requeued it), the allocation's nodes and those whose
  agent was lost in this allocation (where each attempt runs is its ``attempt_placed`` event);
- ``summary.json`` gets a ``slurm`` section: the job, its nodes, those lost and the attempts
  that lost an agent on each;
- when too few usable nodes are left and none came back in ``placement.wait_for_hosts_s``
  (:class:`~launcher.plan.pool.TooFewHosts`) the run writes the nodes to exclude to the run
  directory and exits :data:`EXIT_REQUEUE_WITHOUT_NODES`, for the batch script to submit the
  job again without them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from launcher.backends.slurm.allocation import RESTART_COUNT, Allocation
from launcher.backends.slurm.sbatch import EXCLUDE_FILE, EXIT_REQUEUE_WITHOUT_NODES
from launcher.plan.placement import PastAttempt
from launcher.plan.planner import HostPlan
from launcher.plan.pool import TooFewHosts
from launcher.run.events import Event
from launcher.spec.model import ClusterSpec
from worker.wire.safe_open import read_text, replace_file

#: Most bytes of the file of nodes to exclude that are read (a node name is short).
_MAX_EXCLUDE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class NodeLosses:
    """Which attempts of this allocation lost their agent on which node."""

    lost: Mapping[str, frozenset[int]]

    @classmethod
    def of(cls, history: Sequence[PastAttempt], since_attempt: int) -> NodeLosses:
        """The losses of the attempts from ``since_attempt`` on (those of this allocation: a
        requeued job's earlier attempts ran on nodes it may not have)."""
        lost: dict[str, set[int]] = {}
        for past in history:
            if past.attempt >= since_attempt:
                for host in past.lost_hosts:
                    lost.setdefault(host, set()).add(past.attempt)
        return cls({host: frozenset(attempts) for host, attempts in lost.items()})


@dataclass(frozen=True)
class SlurmAttempt(Event):
    TYPE: ClassVar[str] = "slurm_attempt"
    attempt: int
    job_id: str | None
    restart_count: int
    nodes: Sequence[str]
    left_out: Sequence[str]


class SlurmSession:
    """One run on ``allocation`` (see the module docstring); ``since_attempt``: the first attempt
    this allocation runs (a requeued job's earlier ones ran elsewhere)."""

    stop_signals: tuple[signal.Signals, ...] = (signal.SIGUSR1,)
    requeues_without_hosts = True

    def __init__(self, spec: ClusterSpec, allocation: Allocation, since_attempt: int) -> None:
        self.spec = spec
        self.allocation = allocation
        self.since_attempt = since_attempt
        self._exit_code: int | None = None
        self._left_out: list[str] = []

    def _losses(self, history: Sequence[PastAttempt]) -> NodeLosses:
        return NodeLosses.of(history, self.since_attempt)

    def attempt_events(self, attempt: int, history: Sequence[PastAttempt],
                       hosts: Sequence[HostPlan]) -> Sequence[Event]:
        return [SlurmAttempt(attempt=attempt, job_id=self.allocation.job_id,
                             restart_count=_restart_count(),
                             nodes=[h.name for h in hosts],
                             left_out=sorted(self._losses(history).lost))]

    def summary(self, history: Sequence[PastAttempt]) -> Mapping[str, Any]:
        losses = self._losses(history)
        self._left_out = sorted(losses.lost)
        return {"slurm": {"job_id": self.allocation.job_id, "restart_count": _restart_count(),
                          "nodes": [n.name for n in self.allocation.nodes],
                          "left_out": self._left_out,
                          "lost_agents": {n: sorted(a) for n, a in losses.lost.items()}}}

    @contextlib.contextmanager
    def running(self, run_dir: Path) -> Iterator[None]:
        """Turn :class:`TooFewHosts` into the exclude file and exit code 75; say which nodes
        the run lost."""
        try:
            yield
            if self._left_out:
                print(f"tfcluster: left out node(s) {', '.join(self._left_out)} (their agents "
                      "were lost)", file=sys.stderr)
        except TooFewHosts as exc:
            previous = _read_excluded(run_dir)
            nodes = sorted({*previous, *exc.missing})
            replace_file(run_dir / EXCLUDE_FILE, (",".join(nodes) + "\n").encode(), 0o644)
            print(f"tfcluster: {exc}: requeue the job without them (sbatch --exclude="
                  f"{','.join(sorted(exc.missing))}); wrote {run_dir / EXCLUDE_FILE}",
                  file=sys.stderr)
            self._exit_code = EXIT_REQUEUE_WITHOUT_NODES

    @property
    def exit_code(self) -> int | None:
        return self._exit_code


def _restart_count() -> int:
    try:
        return int(os.environ.get(RESTART_COUNT) or 0)
    except ValueError:
        return 0


def _read_excluded(run_dir: Path) -> list[str]:
    try:
        text = read_text(run_dir / EXCLUDE_FILE, _MAX_EXCLUDE_BYTES)  # never through a symlink
        return [n for n in text.strip().split(",") if n]
    except OSError:
        return []
