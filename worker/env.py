"""Names of the environment variables tfcluster sets for every task (a contract: the README lists them)."""

TF_CONFIG = "TF_CONFIG"
JOB = "TFCLUSTER_JOB"
TASK = "TFCLUSTER_TASK"
ATTEMPT = "TFCLUSTER_ATTEMPT"
RUN_DIR = "TFCLUSTER_RUN_DIR"
CHECKPOINT_DIR = "TFCLUSTER_CHECKPOINT_DIR"
RESUME_CHECKPOINT = "TFCLUSTER_RESUME_CHECKPOINT"
RESUME_STEP = "TFCLUSTER_RESUME_STEP"
REPORT_FD = "TFCLUSTER_REPORT_FD"

#: Exit code of a task that saved a checkpoint on a preemption notice (SIGTERM) and wants the job
#: restarted: TensorFlow's own "restartable" code (failure_handling_util._RESTARTABLE_EXIT_CODE).
PREEMPTION_EXIT_CODE = 143
