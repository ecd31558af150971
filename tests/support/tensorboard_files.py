"""Reading TensorBoard event files back in tests with TensorBoard's own ``EventAccumulator``,
without TensorFlow: ``tensorboard.compat.notf`` makes TensorBoard use its TF stub (otherwise it
imports TensorFlow when it is installed, which costs seconds and half a GiB)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)


def scalars(run: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``tag`` in the TensorBoard run directory ``run``, as TensorBoard shows
    them (points a restart superseded are purged)."""
    acc = EventAccumulator(str(run))
    acc.Reload()
    return [(event.step, event.value) for event in acc.Scalars(tag)]


def timed_scalars(run: Path, tag: str) -> list[tuple[float, int, float]]:
    """``(wall_time, step, value)`` of ``tag``, as :func:`scalars`."""
    acc = EventAccumulator(str(run))
    acc.Reload()
    return [(event.wall_time, event.step, event.value) for event in acc.Scalars(tag)]


def tags(run: Path) -> list[str]:
    acc = EventAccumulator(str(run))
    acc.Reload()
    return sorted(acc.Tags()["scalars"])
