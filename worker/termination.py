"""TensorFlow's own preemption protocol under tfcluster: ``worker.termination_config()``.

A script built on ``tf.distribute.experimental.PreemptionCheckpointHandler`` needs nothing from
tfcluster: on a SIGTERM to any task every task saves at one agreed step and exits with TF's restart
code (42; 143 on GCE), which tfcluster takes for a preemption (``restart.preemption_exit_codes``).
What the handler cannot know is how long it has: tfcluster's ``health.grace_period_s``, the time
between the SIGTERM tfcluster sends (Ctrl-C, SIGTERM to tfcluster, a drill's ``term``) and its
SIGKILL, which every task gets as ``TFCLUSTER_GRACE_PERIOD_S``. :func:`termination_config` hands
it to the handler::

    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        resolver, checkpoint, checkpoint_dir, termination_config=worker.termination_config())

With a grace period the handler saves at once at the agreed step, goes on training, and saves
again at a step agreed shortly before the period ends (it keeps six of its measured step times in
hand), then exits. ``reserve_s`` of tfcluster's period is kept back for that last save and the
process's exit, so TF is given ``grace_period_s - reserve_s``; 0 or less means no grace: save at
once and exit, TF's default off GCE. ``exit_fn`` is left to TF (``sys.exit(42)``, or 143 on GCE).
Outside tfcluster (no ``TFCLUSTER_GRACE_PERIOD_S``) the config is TF's default in every field.

Importing this module never loads TensorFlow; :func:`termination_config` does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from worker.wire import env

__all__ = ["DEFAULT_RESERVE_S", "grace_period_s", "pch_grace_period", "termination_config"]

#: Seconds of tfcluster's grace period kept back for the handler's last save and the exit.
DEFAULT_RESERVE_S = 2.0


def grace_period_s(environ: Mapping[str, str] | None = None) -> float | None:
    """tfcluster's grace period for this task (``TFCLUSTER_GRACE_PERIOD_S``), or None when it is
    not set (not under tfcluster). ValueError if it is set to anything but a finite number >= 0."""
    environ = os.environ if environ is None else environ
    raw = environ.get(env.GRACE_PERIOD_S, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{env.GRACE_PERIOD_S} must be a number of seconds >= 0, not {raw!r}")
    return value


def pch_grace_period(grace_s: float | None, reserve_s: float = DEFAULT_RESERVE_S) -> float | None:
    """The ``grace_period`` to give TF for tfcluster's ``grace_s``: ``reserve_s`` less, never
    below 0 (save at once); None (TF's platform default) when ``grace_s`` is None."""
    if not math.isfinite(reserve_s) or reserve_s < 0:
        raise ValueError(f"reserve_s must be a number of seconds >= 0, not {reserve_s!r}")
    if grace_s is None:
        return None
    return max(0.0, grace_s - reserve_s)


def termination_config(*, reserve_s: float = DEFAULT_RESERVE_S,
                       environ: Mapping[str, str] | None = None) -> Any:
    """A ``tf.distribute.experimental.TerminationConfig`` whose ``grace_period`` is tfcluster's
    grace period less ``reserve_s`` (see :func:`pch_grace_period`) and whose ``exit_fn``,
    ``termination_watcher_fn`` and ``save_fn`` are TF's defaults. Harmless outside tfcluster:
    every field is then TF's default."""
    grace = pch_grace_period(grace_period_s(environ), reserve_s)
    import tensorflow as tf

    return tf.distribute.experimental.TerminationConfig(grace_period=grace)
