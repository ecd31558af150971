"""The environment and exit-code reference: every variable :mod:`worker.wire.env` names (with
the ``#:`` comment written above it there, or the line below for those it leaves to their name)
and every exit code tfcluster and its tasks give a meaning to, from the constants
that hold them."""

from __future__ import annotations

import inspect
import re
import signal

from launcher.reference.markdown import GENERATED, code, comments_above, table, text

#: What the variables whose definition carries no ``#:`` comment hold.
ENV_MEANINGS = {
    "TF_CONFIG": "TensorFlow's cluster and this task's type and index (the same `cluster` for "
                 "every task; an evaluator is left out of it, as TensorFlow expects). Never on a "
                 "command line or in a shell string: it travels inside the launch message.",
    "TFCLUSTER_JOB": "The job's name (the spec's `name`).",
    "TFCLUSTER_TASK": "This task, as TYPE:INDEX (`chief:0`, `worker:1`).",
    "TFCLUSTER_ATTEMPT": "The attempt this task belongs to, 0-based: 1 after the first restart.",
    "TFCLUSTER_RUN_DIR": "The run directory (on the coordinator's machine): events.jsonl, logs, "
                         "summary.json.",
    "TFCLUSTER_CHECKPOINT_DIR": "The chief's checkpoint directory (`checkpoint.dir`, made "
                                "absolute); where a script saves (the chief) and restores from.",
    "TFCLUSTER_RESUME_CHECKPOINT": "On a restart: the latest complete checkpoint tfcluster found "
                                   "(its prefix, e.g. `/ckpt/ckpt-400`); unset on a fresh start.",
    "TFCLUSTER_RESUME_STEP": "On a restart: that checkpoint's number (the training step with "
                             "`TrainingCheckpoint`); unset on a fresh start.",
    "TFCLUSTER_REPORT_FD": "Internal: the file descriptor `worker.report` writes progress to "
                           "(set by the agent; a script never needs it).",
    "TFCLUSTER_DO_NOT_RESTART_EXIT_CODE": "78: a task that exits with it is not restarted, "
                                          "whatever `restart.max_restarts` allows "
                                          "(`sys.exit(int(os.environ[\"TFCLUSTER_DO_NOT_RESTART_EXIT_CODE\"]))`).",
    "TFCLUSTER_MAX_WORKERS": "How many training tasks (chief + workers) the spec asks for (see "
                             "TFCLUSTER_NUM_WORKERS).",
}


def env_vars() -> list[tuple[str, str]]:
    """(name, meaning) of every variable of :mod:`worker.wire.env`, in the module's order.
    Raises ``LookupError`` for a variable with no meaning written anywhere."""
    from worker.wire import env

    comments = comments_above(inspect.getsource(env))
    found = []
    for constant, value in vars(env).items():
        if not isinstance(value, str) or constant.startswith("_") or constant == "OWN_PREFIX":
            continue
        if value != env.TF_CONFIG and not value.startswith(env.OWN_PREFIX):
            continue
        meaning = ENV_MEANINGS.get(value) or comments.get(constant)
        if meaning is None:
            raise LookupError(f"worker/wire/env.py: {constant} ({value}) has no '#:' comment "
                              "and no line in launcher/reference/contracts_page.py's ENV_MEANINGS")
        found.append((value, meaning))
    return found


def exit_codes() -> list[tuple[str, str, str]]:
    """(who, code, meaning) of every exit code with a meaning here, from the constants."""
    from launcher.backends import engine_module
    from launcher.errors import EXIT_BAD_INPUT, EXIT_ERROR
    from launcher.spec.health import DEFAULT_PREEMPTION_EXIT_CODES
    from worker.wire.env import DO_NOT_RESTART_EXIT_CODE, PREEMPTION_EXIT_CODE, TF_RESTART_EXIT_CODE

    requeue: int = engine_module("slurm").EXIT_REQUEUE_WITHOUT_NODES  # type: ignore[attr-defined]

    sigint, sigterm = 128 + signal.SIGINT, 128 + signal.SIGTERM
    return [
        ("tfcluster", "0", "the job succeeded: every task exited 0 (or, for a parameter_server "
         "job, the chief did); `validate`, `preflight`, `doctor`: all is well"),
        ("tfcluster run / local / drill", "the root cause's code", "the job failed: the exit code "
         "of the task that failed first (its root cause), 128+N if it died of signal N"),
        ("tfcluster", str(EXIT_ERROR), "an error tfcluster names in one line (a host not ready, a "
         "run that cannot start), or a failed job whose root cause has no exit code"),
        ("tfcluster", str(EXIT_BAD_INPUT), "bad input: a spec that is not valid (`validate` lists "
         "every problem), a wrong command line"),
        ("tfcluster", f"{sigint} / {sigterm}", "stopped by Ctrl-C / SIGTERM: every task was "
         "stopped (TERM, grace period, KILL); `tfcluster run --resume RUN_DIR` continues it"),
        ("tfcluster", str(requeue), "Slurm: too few nodes are left in the "
         "allocation; the batch script of `tfcluster submit` submits the job again without the "
         "lost nodes (`RUN_DIR/slurm-exclude-nodes`)"),
        ("tfcluster", str(DO_NOT_RESTART_EXIT_CODE), "a task asked not to be restarted (below): "
         "the job failed at once; a Slurm job is neither requeued nor resubmitted"),
        ("a task", ", ".join(str(c) for c in DEFAULT_PREEMPTION_EXIT_CODES), "saved on a "
         "preemption notice, restart me (`restart.preemption_exit_codes`, default): "
         f"{TF_RESTART_EXIT_CODE} is TensorFlow's `PreemptionCheckpointHandler`'s, "
         f"{PREEMPTION_EXIT_CODE} `worker.checkpointing.TrainingCheckpoint`'s (and TF's on GCE); "
         "not counted against `max_restarts` when a newer checkpoint or a notice shows it"),
        ("a task", str(DO_NOT_RESTART_EXIT_CODE), "do not restart me: retrying cannot help (its "
         "input or configuration is wrong); handed to every task as "
         "`TFCLUSTER_DO_NOT_RESTART_EXIT_CODE`"),
        ("a task", "any other", "a failure: the job is restarted from the latest checkpoint "
         "(within `restart.max_restarts`), unless a `restart.rules` entry says otherwise"),
    ]


def render() -> str:
    """The environment and exit codes page (Markdown)."""
    out = ["# Environment and exit codes\n",
           GENERATED.format(source="`worker/wire/env.py` and the exit-code constants"),
           "## Environment of every task\n",
           "tfcluster sets these for every task (the caller's own `TF_CONFIG` and `TFCLUSTER_*` "
           "are never passed on; a spec's `env` may not set them). `worker.context()` reads "
           "them for a script.\n"]
    out.append(table(("Variable", "Meaning"), ((code(name), text(meaning))
                                                 for name, meaning in env_vars())))
    out.append("\n## Exit codes\n")
    out.append(table(("Who", "Exit code", "Meaning"),
                     ((text(who), re.sub(r"\d+", lambda n: code(n.group()), value) if value[0].isdigit()
                       else text(value), text(meaning))
                      for who, value, meaning in exit_codes())))
    return "\n".join(out)
