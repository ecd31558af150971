"""The ``srun`` line that starts one node's agent as a step of the allocation (pure).

``--overlap`` lets the step share the node with the job's other steps, ``--kill-on-bad-exit``
ends the step if its one task fails, ``--input=all`` hands our stdin to the agent (its EOF is the
coordinator's end, as everywhere), and no shell is involved: every argument is one argv word.
"""

from __future__ import annotations

from worker.wire.module_start import agent_argv

SRUN = "srun"


def agent_step_name(job: str) -> str:
    """The name of every step that runs one of ``job``'s agents (``squeue --steps`` shows it)."""
    return f"tfcluster-{job}"


def step_argv_prefix(node: str, *, job: str, workdir: str) -> list[str]:
    """``srun ...`` up to the command: a one-task step on ``node``, in ``workdir``."""
    return [SRUN, "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap",
            "--kill-on-bad-exit=1", "--input=all", "--quiet", f"--job-name={agent_step_name(job)}",
            f"--chdir={workdir}"]


def agent_step_argv(node: str, *, job: str, workdir: str, python: str) -> list[str]:
    return [*step_argv_prefix(node, job=job, workdir=workdir), *agent_argv(python)]
