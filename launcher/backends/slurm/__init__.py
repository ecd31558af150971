"""All of Slurm, as tfcluster's engine for a spec with ``slurm:``: the allocation it runs in
(``allocation``, ``commands``), where each attempt's tasks go (``placement``), agents as job steps
(``srun``, ``steps``), pre-flight as job steps (``probe``), the run's session (``session``: USR1,
``slurm_attempt`` events, exit 75), ``tfcluster submit`` (``sbatch``, ``submit``) and a drill's
``lose-host`` of a node (``node_loss``). The engine
itself is :mod:`.engine`; nothing outside this package imports Slurm code."""

from launcher.backends.slurm.engine import create, size
from launcher.backends.slurm.node_loss import locate_node as locate_lost_host
from launcher.backends.slurm.sbatch import EXIT_REQUEUE_WITHOUT_NODES
from launcher.backends.slurm.submit import submitter

__all__ = ["EXIT_REQUEUE_WITHOUT_NODES", "create", "locate_lost_host", "size", "submitter"]
