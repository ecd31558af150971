"""Running Slurm's client commands (``scontrol``, ``sbatch``) with their failures as one line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from launcher.errors import TfclusterError

#: Longest a Slurm client command may take (the controller answers in well under a second).
COMMAND_TIMEOUT_S = 30.0


class SlurmError(TfclusterError):
    """Slurm refused or could not be asked; the message says which command and why."""


def slurm_command(argv: Sequence[str], *, environ: Mapping[str, str] | None = None,
                  stdin: str | None = None) -> str:
    """``argv``'s standard output; a :class:`SlurmError` naming the command if it fails."""
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False,
                              env=dict(environ) if environ is not None else dict(os.environ))
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: run on a Slurm login or compute node, or put "
                         "Slurm's client commands on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:.0f}s: is "
                         "slurmctld up?") from None
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()
        raise SlurmError(f"{' '.join(argv[:2])} failed (exit {done.returncode}): "
                         f"{why[-1] if why else 'no message'}")
    return done.stdout
