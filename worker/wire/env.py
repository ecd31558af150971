"""Names of the environment variables tfcluster sets for every task (a contract:
docs/reference/environment.md lists them, generated from this module)."""

from collections.abc import Mapping

TF_CONFIG = "TF_CONFIG"
JOB = "TFCLUSTER_JOB"
TASK = "TFCLUSTER_TASK"
ATTEMPT = "TFCLUSTER_ATTEMPT"
RUN_DIR = "TFCLUSTER_RUN_DIR"
CHECKPOINT_DIR = "TFCLUSTER_CHECKPOINT_DIR"
RESUME_CHECKPOINT = "TFCLUSTER_RESUME_CHECKPOINT"
RESUME_STEP = "TFCLUSTER_RESUME_STEP"
REPORT_FD = "TFCLUSTER_REPORT_FD"
#: The read end of the agent's control pipe to the task (:mod:`worker.wire.control`): the job's
#: stop step on a preemption notice.
CONTROL_FD = "TFCLUSTER_CONTROL_FD"
#: The mark an agent puts in the environment of every process it starts
#: (:mod:`worker.wire.process_mark`): what proves, after the agent died, that a process is the job's.
PROCESS_MARK = "TFCLUSTER_PROCESS_MARK"
#: ``health.grace_period_s``: how long a task has between tfcluster's SIGTERM and its SIGKILL
#: (``worker.termination_config()`` hands it to TensorFlow's PreemptionCheckpointHandler).
GRACE_PERIOD_S = "TFCLUSTER_GRACE_PERIOD_S"

#: Every variable with this prefix, and TF_CONFIG, is tfcluster's own: set or removed by it alone.
OWN_PREFIX = "TFCLUSTER_"


def without_own(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without tfcluster's own variables, so that none of the caller's (a stale
    ``TFCLUSTER_RESUME_CHECKPOINT``, an outer job's ``TF_CONFIG``) reaches a task: the launch's
    overlay then sets exactly what tfcluster means for this task."""
    return {name: value for name, value in environ.items()
            if name != TF_CONFIG and not name.startswith(OWN_PREFIX)}

#: Exit code of a task that saved a checkpoint on a preemption notice (SIGTERM) and wants the job
#: restarted: TensorFlow's own "restartable" code (failure_handling_util._RESTARTABLE_EXIT_CODE).
PREEMPTION_EXIT_CODE = 143

#: What TensorFlow's ``PreemptionCheckpointHandler`` exits with after its agreed save, on every
#: platform but GCE (there: 143); ``restart.preemption_exit_codes`` lists both by default.
TF_RESTART_EXIT_CODE = 42

#: Exit code with which a task says "do not restart me": retrying cannot help (its input or
#: configuration is wrong, it finished some other way). The job fails at once, whatever
#: ``restart.max_restarts`` allows, and a Slurm job is not requeued. 78 is sysexits.h's
#: ``EX_CONFIG``, in the 1-127 range Kubeflow's TFJob ``ExitCode`` policy treats as permanent,
#: and no Python, shell or TensorFlow code of its own (1, 2, 42, 126, 127, 128+N).
DO_NOT_RESTART_EXIT_CODE = 78
#: Hands :data:`DO_NOT_RESTART_EXIT_CODE` to every task (``sys.exit(int(os.environ[...]))``).
DO_NOT_RESTART = "TFCLUSTER_DO_NOT_RESTART_EXIT_CODE"

#: How many training tasks (chief + workers) this attempt runs, and how many the spec asks for:
#: with a host pool (``placement.min_workers``) an attempt may run smaller than the spec.
NUM_WORKERS = "TFCLUSTER_NUM_WORKERS"
MAX_WORKERS = "TFCLUSTER_MAX_WORKERS"
