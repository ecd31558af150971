"""``tfcluster submit SPEC --nodes N``, Slurm's half: the batch request checked against the spec
(:meth:`SlurmSubmitter.dryrun`, what ``--dry-run`` prints) and its submission
(:meth:`SlurmSubmitter.schedule`, the only side effect; see :mod:`.sbatch`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.backends.slurm.placement import nodes_to_allocate
from launcher.backends.slurm.sbatch import BatchRequest, batch_script, submit
from launcher.errors import UsageError
from launcher.spec.model import ClusterSpec
from worker.wire.safe_open import replace_file


class SlurmSubmitter:
    """Options (``tfcluster submit``'s): nodes, time, partition, account, grace, run_dir,
    sbatch_arg."""

    def dryrun(self, spec: ClusterSpec, spec_path: str,
               options: Mapping[str, Any]) -> BatchRequest:
        nodes, grace = options["nodes"], options["grace"]
        need = nodes_to_allocate(spec)
        if nodes < need:
            raise UsageError(f"tfcluster submit: --nodes {nodes} is too few: {spec_path} needs "
                             f"{need} node(s) (tasks / placement.tasks_per_host + "
                             "placement.spares)")
        if not 1 <= grace <= 3600:
            raise UsageError("tfcluster submit: --grace must be between 1 and 3600 seconds")
        if grace <= spec.health.grace_period_s:
            raise UsageError(f"tfcluster submit: --grace {grace} leaves the tasks no time to "
                             f"save: make it longer than health.grace_period_s "
                             f"({spec.health.grace_period_s:g}s)")
        run_dir = Path(options.get("run_dir") or Path("runs") / spec.name).absolute()
        script = run_dir.parent / f"{run_dir.name}.sbatch"
        return BatchRequest(spec=str(Path(spec_path).absolute()), run_dir=str(run_dir),
                            script=str(script), job_name=f"tfcluster-{spec.name}",
                            nodes=nodes, python=sys.executable, workdir=os.getcwd(),
                            grace_s=grace, time=options.get("time"),
                            partition=options.get("partition"),
                            account=options.get("account"),
                            extra=tuple(options.get("sbatch_arg") or ()))

    def show(self, request: BatchRequest) -> str:
        return batch_script(request)

    def schedule(self, request: BatchRequest) -> str:
        """Write the script beside the run directory and ``sbatch`` it; the job id."""
        Path(request.run_dir).mkdir(parents=True, exist_ok=True)
        # a fresh file renamed over the name: never written through a symlink planted there
        replace_file(request.script, batch_script(request).encode(), 0o644)
        return submit(request.script)


def submitter() -> SlurmSubmitter:
    return SlurmSubmitter()
