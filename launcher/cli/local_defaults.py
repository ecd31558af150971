"""What ``tfcluster local`` turns on without being asked, and the one line that says what is off.

Like torchrun, ``local`` restarts nothing unless ``--max-restarts`` says so. Unlike torchrun it
knows where the chief's checkpoints go: without ``--checkpoint-dir`` they go to ``checkpoints/``
in the run's own directory (``TFCLUSTER_CHECKPOINT_DIR``), so that ``--max-restarts`` alone
restarts from them and a run stopped with Ctrl-C continues with ``tfcluster run --resume
RUN_DIR``, while a new run, in a new run directory, never picks up an older run's checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.errors import TfclusterError
from launcher.run.directory import new_run_dir
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec

#: Where run directories go by default (:func:`launcher.run.directory.new_run_dir`).
RUNS_DIR = "runs"
#: The chief's checkpoint dir of a ``local`` run without ``--checkpoint-dir``, in its run dir.
CHECKPOINTS = "checkpoints"


@contextlib.contextmanager
def checkpoints_in_run_dir(data: dict[str, Any], args: argparse.Namespace) -> Iterator[ClusterSpec]:
    """The spec of ``data`` with its checkpoint dir in the run directory, which is chosen (and,
    without ``--run-dir``, created) now; ``args.run_dir`` is set to it. A run directory created
    here is removed again if the run raises before using it (pre-flight refused the hosts)."""
    created = not args.run_dir
    made: list[Path] = []  # what to remove again: the run directory, and runs/ if it is new
    if created:
        parent = Path(RUNS_DIR)
        made = [] if parent.is_dir() else [parent]
        args.run_dir = str(new_run_dir(str(data["name"]), base=RUNS_DIR))
        made.insert(0, Path(args.run_dir))
    directory = Path(args.run_dir).absolute() / CHECKPOINTS
    try:
        yield spec_from_dict({**data, "checkpoint": {"dir": str(directory)}},
                             source="tfcluster local")
    except TfclusterError:
        for path in made:
            with contextlib.suppress(OSError):  # not empty: the run used it
                os.rmdir(path)
        raise


def fault_tolerance_note(spec: ClusterSpec) -> str | None:
    """One line when restarts are off (``--max-restarts 0``): what that means and how to turn
    them on; None when they are on."""
    if spec.restart.max_restarts:
        return None
    where = spec.checkpoint.dir if spec.checkpoint is not None else \
        f"the run directory's {CHECKPOINTS}/"
    return ("restarts are off (--max-restarts 0, as in torchrun): a failed task ends the job; "
            f"--max-restarts N restarts it from the chief's latest checkpoint in {where} "
            "(TFCLUSTER_CHECKPOINT_DIR)")
