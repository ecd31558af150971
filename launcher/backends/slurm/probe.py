"""Pre-flight over a Slurm allocation: the probe as a job step on every node.

On each node of the plan the one probe (:mod:`launcher.preflight.probe`) runs as a job step exactly
where that node's agent would run: the same ``srun`` line (:func:`.srun.step_argv_prefix`), the
same python, the same workdir. Every node shares the checkpoint dir, so the chief's node writes a
marker there and every other node must read it back (:mod:`launcher.preflight.group`). The nodes
are shown one line each.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from launcher.backends.local.probe import ChildProbe
from launcher.backends.local.program import ChildProgram
from launcher.backends.slurm.srun import step_argv_prefix
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.preflight.group import run_preflight
from launcher.preflight.report import HostReport, Layout, PreflightReport
from launcher.preflight.runner import ProbeError, ProbeOutput

#: How long one node's probe may take (srun start-up plus a Python start).
PROBE_TIMEOUT_S = 60.0


class StepProbeSession:
    """One node's probe as a job step, a child process of the coordinator."""

    def __init__(self, host: HostPlan, job: str, srun: str | None, timeout_s: float) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.workdir = host.tasks[0].cwd if host.tasks else "."
        self.prefix = step_argv_prefix(host.name, job=job, workdir=self.workdir)
        if srun is not None:
            self.prefix[0] = srun
        self._child = ChildProbe()

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        try:
            status, stdout, stderr = self._child.run([*self.prefix, *argv], None, self.timeout_s)
        except OSError as exc:
            raise ProbeError(f"the probe step did not run: {exc}",
                             f"cannot start {self.prefix[0]!r}: {exc} (run inside a Slurm "
                             "allocation with srun on PATH)") from exc
        except subprocess.TimeoutExpired as exc:
            raise ProbeError(f"the probe step took over {self.timeout_s:.0f}s") from exc
        return ProbeOutput(status, stdout, stderr, self.workdir)

    def start(self, argv: Sequence[str]) -> ChildProgram:
        try:
            return ChildProgram([*self.prefix, *argv], None, self.workdir)
        except OSError as exc:
            raise ProbeError(f"the probe step did not run: {exc}",
                             f"cannot start {self.prefix[0]!r}: {exc} (run inside a Slurm "
                             "allocation with srun on PATH)") from exc

    def explain(self, output: ProbeOutput) -> ProbeError:
        tail = (output.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])
        return ProbeError(f"{self.host.python} did not run there (exit {output.status}): "
                          f"{tail[-1]}")

    def checkpoint_dir_problem(self, path: str) -> str | None:
        """Never asked: every node shares the checkpoint dir (the marker check instead)."""
        return None

    def close(self) -> None:
        self._child.close()


class StepProbeRunner:
    """Pre-flight's probe on the nodes of the allocation this process runs in."""

    shared_checkpoint_dir = True
    layout: Layout = "lines"

    def __init__(self, job: str, srun: str | None = None,
                 timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.job = job
        self.srun = srun  # another srun binary (tests); None: the one on PATH
        self.timeout_s = timeout_s

    def describe(self, host: HostPlan) -> str:
        return f"node {host.name}"

    def open(self, host: HostPlan, report: HostReport) -> StepProbeSession:
        return StepProbeSession(host, self.job, self.srun, self.timeout_s)


def slurm_preflight(launch_plan: LaunchPlan, srun: str | None = None) -> PreflightReport:
    """Every node of ``launch_plan`` at once (the chief's first: it writes the marker)."""
    return run_preflight(launch_plan, StepProbeRunner(launch_plan.job, srun))
