"""Slurm, as tfcluster talks to it: the allocation it runs in (``SLURM_*`` and ``scontrol``),
the ``srun`` line that starts a node's agent as a job step, the ``sbatch`` script of
``tfcluster submit``, and a requeue without a bad node. Knows nothing of plans or backends; imports
only :mod:`launcher.errors`.
"""
