"""The Slurm pieces of the composition root: a spec with ``slurm:`` runs on the allocation it is
started in (see :mod:`launcher.plan.slurm_planner` and :mod:`launcher.backends.slurm`).

- the planner places the tasks on the allocation's nodes (:func:`slurm_planner`); a requeued job
  continues its run directory with ``tfcluster run --resume`` (the batch script's choice);
- agents start as job steps (:class:`~launcher.backends.slurm.SlurmBackend`);
- the checkpoint directory is shared by every node, so the coordinator reads and locks it as a
  local one;
- ``SIGUSR1`` (``sbatch --signal=B:USR1@GRACE``: the time limit is near) stops the job like
  SIGTERM: every task gets SIGTERM and its grace period to save;
- when too few good nodes are left (:class:`~launcher.plan.slurm_planner.NodesExhausted`) the
  run writes the nodes to exclude to the run directory and exits
  :data:`~launcher.slurm.sbatch.EXIT_REQUEUE_WITHOUT_NODES`, for the batch script to submit the
  job again without them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from launcher.backends.slurm import SlurmBackend, step_argv
from launcher.job.checkpoint_lock import LockFile
from launcher.job.checkpoints import CheckpointFS, LocalFS
from launcher.job.flock_lock import FlockLockFile
from launcher.job.hooks import AttemptHooks
from launcher.output.events import Listener
from launcher.plan.planner import HostPlan, LaunchPlan, Planner
from launcher.plan.slurm_planner import NodesExhausted, SlurmPlanner
from launcher.slurm.allocation import Allocation, read_allocation
from launcher.slurm.sbatch import EXCLUDE_FILE, EXIT_REQUEUE_WITHOUT_NODES
from launcher.spec.model import ClusterSpec

#: Signals a Slurm run treats as "stop gracefully", besides SIGINT/TERM/HUP.
SLURM_STOP_SIGNALS = (signal.SIGUSR1,)


def slurm_planner(spec: ClusterSpec, run_dir: str, *, base_dir: str,
                  allocation: Allocation | None = None) -> SlurmPlanner:
    """The planner for ``spec`` on ``allocation`` (default: the one this process runs in)."""
    allocation = allocation or read_allocation()
    return SlurmPlanner.create(spec, allocation.nodes, run_dir=run_dir, python=sys.executable,
                               base_dir=base_dir)


def shared_fs(_host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
    """Every node sees the chief's checkpoint directory at the same path (pre-flight checks it)."""
    return contextlib.nullcontext(LocalFS())


def shared_lock(_host: HostPlan, directory: str) -> AbstractContextManager[LockFile | None]:
    return contextlib.nullcontext(FlockLockFile(directory))


def step_lines(launch_plan: LaunchPlan) -> list[str]:
    """What ``tfcluster plan`` adds for a Slurm spec: each node's srun line and tasks."""
    lines = ["", "slurm job steps (one agent per node):"]
    for host in launch_plan.hosts:
        tasks = ", ".join(f"{t.task}@{host.address}:{t.port}" for t in host.tasks)
        lines.append(f"  {host.name}: {tasks}")
        lines.append(f"    {' '.join(step_argv(host, launch_plan.job))}")
    return lines


@contextlib.contextmanager
def nodes_exhausted_exit(run_dir: Path, planner: SlurmPlanner,
                         exit_code: list[int]) -> Iterator[None]:
    """Turn :class:`NodesExhausted` into the exclude file and exit code 75 (``exit_code[0]``)."""
    try:
        yield
    except NodesExhausted as exc:
        previous = _read_excluded(run_dir)
        nodes = sorted({*previous, *exc.bad})
        (run_dir / EXCLUDE_FILE).write_text(",".join(nodes) + "\n")
        print(f"tfcluster: {exc}; wrote {run_dir / EXCLUDE_FILE}", file=sys.stderr)
        exit_code.append(EXIT_REQUEUE_WITHOUT_NODES)
    finally:
        _note_nodes(run_dir, planner)


def _read_excluded(run_dir: Path) -> list[str]:
    try:
        return [n for n in (run_dir / EXCLUDE_FILE).read_text().strip().split(",") if n]
    except OSError:
        return []


def _note_nodes(run_dir: Path, planner: SlurmPlanner) -> None:
    """Add the allocation and the nodes left out to ``summary.json``."""
    summary = run_dir / "summary.json"
    left_out = planner.bad_nodes()
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(summary.read_text())
    if not data:
        return
    data["slurm"] = {"job_id": os.environ.get("SLURM_JOB_ID"),
                     "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
                     "nodes": [n.name for n in planner.nodes], "left_out": left_out,
                     "lost_agents": {n: sorted(a) for n, a in planner.health.lost.items()}}
    with contextlib.suppress(OSError):
        summary.write_text(json.dumps(data, indent=2) + "\n")
    if left_out:
        print(f"tfcluster: left out node(s) {', '.join(left_out)} (their agents were lost)",
              file=sys.stderr)


@dataclasses.dataclass
class SlurmParts:
    """What ``run_job`` wires differently for a Slurm planner."""

    planner: SlurmPlanner
    backend: SlurmBackend = dataclasses.field(default_factory=SlurmBackend)
    #: Set when the run stopped to be resubmitted without some nodes.
    exit_code: list[int] = dataclasses.field(default_factory=list)

    fs = staticmethod(shared_fs)
    lock = staticmethod(shared_lock)
    signals = SLURM_STOP_SIGNALS

    @property
    def listeners(self) -> list[Listener]:
        return [self.planner.health]

    def hooks(self, inner: AttemptHooks | None) -> AttemptHooks:
        """``inner`` (a drill's faults, or none) plus the ``slurm_attempt`` event."""
        from launcher.cli.slurm_hooks import SlurmEventHooks

        return SlurmEventHooks(self.planner, inner)

    def guard(self, run_dir: Path) -> AbstractContextManager[None]:
        return nodes_exhausted_exit(run_dir, self.planner, self.exit_code)


def slurm_parts(planner: Planner) -> SlurmParts | None:
    return SlurmParts(planner) if isinstance(planner, SlurmPlanner) else None


def slurm_ready(planner: Planner, _args: argparse.Namespace) -> bool:
    """Pre-flight on every node of the first attempt; prints each problem, True when none."""
    from launcher.preflight.slurm import report_lines, slurm_preflight

    reports = slurm_preflight(planner.preview())
    if all(report.ok for report in reports):
        return True
    print(f"tfcluster: job {planner.spec.name} not started: pre-flight found problems on the "
          "allocation's nodes:", file=sys.stderr)
    for line in report_lines(reports):
        print(f"  {line}", file=sys.stderr)
    return False


def print_slurm_preflight(spec: ClusterSpec) -> int:
    """``tfcluster preflight`` for a Slurm spec: one line per node; exit 0 when all are ready."""
    from launcher.preflight.slurm import report_lines, slurm_preflight

    reports = slurm_preflight(slurm_planner(spec, "", base_dir=os.getcwd()).preview())
    for line in report_lines(reports):
        print(line)
    return 0 if all(report.ok for report in reports) else 1
