"""The batch script of ``tfcluster submit`` (pure) and its submission.

The script runs ``tfcluster run`` in the allocation with a run directory that does not carry the
job id, so a requeued job finds it again and continues it (``tfcluster run --resume``). Slurm is
asked to send the batch shell ``USR1`` ``grace`` seconds before the time limit
(``--signal=B:USR1@GRACE``, or ``scancel --batch --signal=USR1 JOB`` by hand); the script
forwards it to tfcluster, which stops every task with SIGTERM so that they save at an agreed step,
and then requeues the job (``scontrol requeue``). A ``TERM`` (``scancel``, or a preemption, which
Slurm requeues by itself since the job has ``--requeue``) is forwarded too, and the job just ends.
When tfcluster exits with :data:`EXIT_REQUEUE_WITHOUT_NODES` it has written the nodes to avoid
to :data:`EXCLUDE_FILE` in the run directory; the script then submits itself again with
``--exclude`` (a running job's excluded nodes cannot be changed, so this is a new job id that
continues the same run directory). When tfcluster exits with
:data:`~worker.wire.env.DO_NOT_RESTART_EXIT_CODE` (a task asked not to be restarted, and the job
failed of it) the script neither requeues nor resubmits, even when Slurm asked it to stop.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.backends.slurm.commands import SlurmError, slurm_command
from launcher.errors import UsageError
from worker.wire.env import DO_NOT_RESTART_EXIT_CODE

#: tfcluster's exit code when the job should run again without some nodes (EX_TEMPFAIL).
EXIT_REQUEUE_WITHOUT_NODES = 75
#: In the run directory: the nodes a resubmission excludes, comma-separated.
EXCLUDE_FILE = "slurm-exclude-nodes"
_JOB_ID = re.compile(r"^(\d+)")
#: What ends a line of the script (or a C string): a value holding one would end its ``#SBATCH``
#: comment, and bash would run the rest as a command of the batch script.
_LINE_BREAKS = re.compile(r"[\n\r\x00\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
#: Each field of :class:`BatchRequest` as the user knows it, in the order they are checked (the
#: current directory first: a relative ``--run-dir`` or SPEC lies under it).
_NAMED = (("workdir", "the current directory (the job's --chdir)"), ("spec", "the SPEC path"),
          ("run_dir", "--run-dir"), ("script", "the script path (beside --run-dir)"),
          ("python", "the Python interpreter path"), ("job_name", "the job name"),
          ("time", "--time"), ("partition", "--partition"), ("account", "--account"),
          ("extra", "--sbatch-arg"))


@dataclass(frozen=True)
class BatchRequest:
    """What ``tfcluster submit`` asks of Slurm (everything is quoted into the script)."""

    spec: str  # absolute path
    run_dir: str  # absolute path
    script: str  # where the script is written (absolute)
    job_name: str
    nodes: int
    python: str
    workdir: str
    grace_s: int = 120
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a value that is not one line (UsageError naming it): the script quotes every
        value for bash, but no quoting keeps a line break inside a ``#SBATCH`` comment."""
        for name, said in _NAMED:
            value = getattr(self, name)
            for text in value if isinstance(value, tuple) else (value,):
                if text is not None:
                    one_line(said, str(text))


def one_line(said: str, value: str) -> str:
    """``value``, if it holds no line break, carriage return or NUL; else UsageError naming it."""
    if _LINE_BREAKS.search(value) is None:
        return value
    shown = repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    fix = ("run tfcluster submit from a directory whose path is one line"
           if said.startswith("the current directory") else "give it on one line")
    raise UsageError(f"tfcluster submit: {said} holds a line break or NUL ({shown}), which would "
                     f"end its line of the batch script; {fix}")


def _directive(option: str, value: str | None = None) -> str:
    word = option if value is None else f"{option}={value}"
    return f"#SBATCH {shlex.quote(word)}"


def batch_script(request: BatchRequest) -> str:
    r = request
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        _directive("--job-name", r.job_name),
        _directive("--nodes", str(r.nodes)),
        _directive("--ntasks-per-node", "1"),
        _directive("--signal", f"B:USR1@{r.grace_s}"),
        _directive("--requeue"),
        _directive("--open-mode", "append"),
        _directive("--output", f"{r.run_dir}/slurm-%j.out"),
        _directive("--chdir", r.workdir),
    ]
    lines += [_directive(option, value) for option, value in
              (("--time", r.time), ("--partition", r.partition), ("--account", r.account))
              if value is not None]
    lines += [f"#SBATCH {q(word)}" for word in r.extra]
    lines += [
        "# written by tfcluster submit: runs the job; on USR1 every task saves and the job requeues",
        f"run_dir={q(r.run_dir)}",
        f"spec={q(r.spec)}",
        f"script={q(r.script)}",
        'echo "tfcluster: slurm job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0}'
        ' on $SLURM_JOB_NODELIST"',
        'if [ -s "$run_dir/events.jsonl" ]; then',
        '  set -- run --resume "$run_dir" --quiet',
        "else",
        '  set -- run "$spec" --run-dir "$run_dir" --quiet',
        "fi",
        "stopped=0",
        "trap 'stopped=1; kill -USR1 \"$pid\" 2>/dev/null' USR1",
        "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM",
        f'{q(r.python)} -m launcher "$@" &',
        "pid=$!",
        'while wait "$pid"; rc=$?; kill -0 "$pid" 2>/dev/null; do :; done',
        'wait "$pid" 2>/dev/null; rc=$?',
        f'if [ "$rc" = {DO_NOT_RESTART_EXIT_CODE} ]; then',
        f'  echo "tfcluster: a task exited {DO_NOT_RESTART_EXIT_CODE} (do not restart);'
        ' not requeueing job $SLURM_JOB_ID"',
        'elif [ "$stopped" = 1 ]; then',
        '  echo "tfcluster: stopped by Slurm; requeueing job $SLURM_JOB_ID"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        f'elif [ "$rc" = {EXIT_REQUEUE_WITHOUT_NODES} ] && [ -s "$run_dir/{EXCLUDE_FILE}" ]; then',
        f'  exclude=$(cat "$run_dir/{EXCLUDE_FILE}")',
        '  echo "tfcluster: submitting again without $exclude"',
        '  sbatch --exclude="$exclude" "$script"',
        "fi",
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def submit(script: str, extra: Sequence[str] = ()) -> str:
    """``sbatch`` the script; the job id."""
    out = slurm_command(["sbatch", "--parsable", *extra, script])
    match = _JOB_ID.match(out.strip())
    if match is None:
        raise SlurmError(f"sbatch printed no job id: {out.strip()!r}")
    return match.group(1)
