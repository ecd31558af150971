"""Saving a whole model under MultiWorkerMirroredStrategy the way TensorFlow prescribes.

Under MWMS every task must call save (saving may run collective ops, and a task that skips it
leaves the others waiting), but only the chief's copy is wanted: TF's multi-worker guides have
every other task write into a temporary directory of its own and delete it. :func:`save_model`
does exactly that, for every format a TF model is saved in::

    worker.save_model(model, "/shared/export/digits")         # SavedModel directory
    worker.save_model(model, "/shared/export/digits.keras")   # Keras zip (Keras 3 or tf_keras)
    worker.save_model(model, "/shared/export/digits.h5")      # HDF5 (tf_keras)

On the chief the model lands at ``path`` and the export is reported to tfcluster (report kind
``exported``), which records it in ``summary.json`` (``exports``); on every other task it goes to
``<parent>/workertemp_<task>/<name>``, which is removed at once. :func:`model_checkpoint` is
tf_keras ``ModelCheckpoint`` with the same rule, reporting what the chief saved. The chief's
``path`` must be on storage the chief can write; nothing else needs to be shared.

TensorFlow is imported lazily: importing this module loads neither TF nor Keras.
"""

from __future__ import annotations

import os
import shutil
from enum import Enum
from typing import Any

from worker.reporting import send as report_send
from worker.task_context import TaskContext
from worker.wire.reports import ReportKind

__all__ = ["SaveFormat", "model_checkpoint", "save_format", "save_model", "write_path"]

_classes: dict[str, type] = {}


class SaveFormat(str, Enum):
    SAVED_MODEL = "saved_model"
    KERAS = "keras"
    H5 = "h5"


def save_format(path: str) -> SaveFormat:
    """What ``path``'s suffix asks for: ``.keras``, ``.h5`` / ``.hdf5``, else a SavedModel dir."""
    lowered = path.lower()
    if lowered.endswith(".keras"):
        return SaveFormat.KERAS
    if lowered.endswith((".h5", ".hdf5")):
        return SaveFormat.H5
    return SaveFormat.SAVED_MODEL


def temp_dir_for(path: str, ctx: TaskContext) -> str:
    """The directory a non-chief task writes its throw-away copy of ``path`` into."""
    parent = os.path.dirname(os.path.abspath(path))
    return os.path.join(parent, f"workertemp_{ctx.task_type}_{ctx.task_index}")


def write_path(path: str, ctx: TaskContext) -> str:
    """Where this task writes ``path``: ``path`` itself on the chief, else inside
    :func:`temp_dir_for` (the same name, so every format's rules about suffixes hold)."""
    if ctx.is_chief:
        return path
    return os.path.join(temp_dir_for(path, ctx), os.path.basename(os.path.normpath(path)))


def save_model(model: Any, path: str, *, ctx: TaskContext | None = None) -> str | None:
    """Save ``model`` to ``path`` on the chief; every task must call this (see the module doc).

    ``model`` is a Keras 3 model (a SavedModel is written with ``model.export``, serving
    ``serve``), a tf_keras model (``model.save``), or any ``tf.Module``
    (``tf.saved_model.save``). Returns ``path`` on the chief, None on the other tasks.
    """
    if ctx is None:
        from worker.task_context import context

        ctx = context()
    fmt = save_format(path)
    target = write_path(path, ctx)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    try:
        _write(model, target, fmt)
    finally:
        if not ctx.is_chief:
            shutil.rmtree(temp_dir_for(path, ctx), ignore_errors=True)
    if not ctx.is_chief:
        return None
    report_send({"kind": ReportKind.EXPORTED.value, "path": os.path.abspath(path),
                 "format": fmt.value})
    return path


def _is_keras3(model: Any) -> bool:
    return type(model).__module__.startswith("keras.") or any(
        cls.__module__.startswith("keras.src.") for cls in type(model).__mro__)


def _write(model: Any, target: str, fmt: SaveFormat) -> None:
    if fmt is not SaveFormat.SAVED_MODEL:
        model.save(target)
        return
    if _is_keras3(model):
        model.export(target, format="tf_saved_model", verbose=False)
    elif hasattr(model, "save") and hasattr(model, "compile"):  # tf_keras
        model.save(target, save_format="tf")
    else:
        import tensorflow as tf

        tf.saved_model.save(model, target)


def model_checkpoint(filepath: str, **kwargs: Any) -> Any:
    """tf_keras ``ModelCheckpoint(filepath, **kwargs)`` under TF's multi-worker rule, which
    tf_keras applies through the model's strategy: the chief writes ``filepath``, every other
    task a ``workertemp_<index>`` copy next to it that is removed after each save. On the chief,
    each file saved is also reported to tfcluster as an export (``summary.json``'s ``exports``)."""
    return _checkpoint_class()(filepath, **kwargs)


def _checkpoint_class() -> type:
    if "checkpoint" in _classes:
        return _classes["checkpoint"]
    import tf_keras

    class ChiefModelCheckpoint(tf_keras.callbacks.ModelCheckpoint):  # type: ignore[misc]
        """ModelCheckpoint that tells tfcluster what the chief saved."""

        def _save_model(self, epoch: int, batch: int | None, logs: dict[str, Any]) -> None:
            super()._save_model(epoch, batch, logs)
            from worker.task_context import context

            written = getattr(self, "_write_filepath", None)
            if context().is_chief and isinstance(written, str) and os.path.exists(written):
                report_send({"kind": ReportKind.EXPORTED.value, "path": os.path.abspath(written),
                             "format": save_format(written).value})

    _classes["checkpoint"] = ChiefModelCheckpoint
    return ChiefModelCheckpoint
