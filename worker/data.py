"""``tf.data`` input under MultiWorkerMirroredStrategy that resumes on the exact next batch.

The iterators of ``strategy.experimental_distribute_dataset`` cannot be checkpointed, and a
``repeat()``ed dataset rebuilt by a restarted attempt starts again from its first batch: the job
resumes at the right step but trains on the wrong data. :func:`resumable_input` makes the input
position a number the checkpoint already holds, the count of *global* batches consumed (the
custom loop's step counter; ``optimizer.iterations`` under Keras ``fit``), and builds the input
from it:

- ``global_batches()`` is a deterministic (seeded) ``tf.data.Dataset`` of global batches, the
  same on every task, e.g. of example indices; it is skipped to ``position`` *before*
  distribution, so nothing has to be read and thrown away on the device;
- ``strategy.distribute_datasets_from_function`` then gives every input pipeline (one per worker)
  its replicas' slices of each global batch, as the ``tf.distribute.InputContext`` says (as even
  as can be: :func:`replica_bounds`), and ``per_replica`` (e.g. a ``tf.gather`` of the examples)
  runs on those slices only.

The position counts global batches and the split happens after the skip, so an elastic job
(``worker.context().resized``) keeps both the global batch and the sample order whatever its worker
count: global batch ``n`` is the same examples at every count, and each of this attempt's replicas
gets ``global_batch_size / num_replicas_in_sync`` of them. A job resumed at step ``n`` with one
worker trains, from there on, on exactly the global batches a two-worker run would have.
``require_divisible=True`` refuses a global batch this attempt's replicas do not divide (see
:func:`replica_bounds`) instead of splitting it as evenly as can be.

A custom loop restores its checkpoint first and passes the restored step::

    start = ckpt.restore()
    batches = resumable_input(strategy, global_batches, global_batch_size=64, position=start,
                              per_replica=lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))
    iterator = iter(batches)

Keras ``fit`` restores inside ``fit`` (``BackupAndRestore``), after the input exists, so pass
:func:`keras_resume_position` (the step of the backup ``fit`` will restore) and an infinite
``global_batches`` (``repeat()``), with ``steps_per_epoch``.

TensorFlow is imported lazily: importing this module never loads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.task_context import TaskContext

__all__ = ["keras_resume_position", "replica_bounds", "resumable_input"]

_CKPT_NUMBER = re.compile(r"-(\d+)$")


def resumable_input(strategy: Any, global_batches: Callable[[], Any], *, global_batch_size: int,
                    position: int, per_replica: Callable[..., Any] | None = None,
                    require_divisible: bool = False) -> Any:
    """A distributed dataset of ``global_batches()`` from global batch ``position`` on (see the
    module doc). Each element of ``global_batches()`` is a tensor, or a tuple of tensors, whose
    first dimension is ``global_batch_size``; ``per_replica`` maps each replica's slice (given as
    separate arguments for a tuple). ``require_divisible``: raise :class:`ValueError` (naming both
    numbers) when this attempt's replicas do not divide ``global_batch_size``."""
    import tensorflow as tf

    if position < 0:
        raise ValueError(f"position must be >= 0, not {position}")

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        bounds = replica_bounds(global_batch_size, context.num_replicas_in_sync,
                                require_divisible=require_divisible)
        local = context.num_replicas_in_sync // context.num_input_pipelines
        first = context.input_pipeline_id * local  # this pipeline's first replica

        def mine(*batch: tf.Tensor) -> tf.data.Dataset:
            # The slices of this pipeline's replicas, one element per replica, in replica order.
            def part(r: int) -> tf.data.Dataset:
                sliced = tuple(t[bounds[r]:bounds[r + 1]] for t in batch)
                return tf.data.Dataset.from_tensors(sliced if len(sliced) > 1 else sliced[0])

            replicas = part(first)
            for r in range(first + 1, first + local):
                replicas = replicas.concatenate(part(r))
            return replicas

        dataset = global_batches().skip(position).flat_map(mine)
        if per_replica is not None:
            dataset = dataset.map(per_replica)
        options = tf.data.Options()
        options.deterministic = True
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF  # sharded above, by batch slice
        return dataset.with_options(options)

    return strategy.distribute_datasets_from_function(dataset_fn)


def replica_bounds(global_batch_size: int, replicas: int, *,
                   require_divisible: bool = False) -> list[int]:
    """Where each replica's slice of a global batch starts (and the last ends): as even as can
    be, the later replicas one example more when the batch does not divide (a
    :class:`ValueError` with ``require_divisible``)."""
    if global_batch_size < replicas:
        raise ValueError(f"a global batch of {global_batch_size} cannot give each of {replicas} "
                         "replicas an example: raise the batch size")
    if require_divisible and global_batch_size % replicas:
        raise ValueError(f"a global batch of {global_batch_size} does not divide among the "
                         f"{replicas} replicas of this attempt: use a multiple of {replicas} (of "
                         "every replica count, for an elastic job)")
    return [r * global_batch_size // replicas for r in range(replicas + 1)]


def keras_resume_position(ctx: TaskContext, backup_dir: str | None = None) -> int:
    """The global step the ``BackupAndRestore`` backup that ``fit`` will restore was taken at (0
    when there is none): ``TFCLUSTER_RESUME_STEP`` under tfcluster, else the number of the latest
    backup in ``<backup_dir>/chief`` (``worker.keras`` numbers backups by training step).
    ``backup_dir`` defaults to the job's checkpoint directory."""
    if ctx.resume_step is not None:
        return ctx.resume_step
    directory = backup_dir or ctx.chief_checkpoint_dir
    if not directory:
        return 0
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(os.path.join(directory, "chief"))
    found = _CKPT_NUMBER.search(latest or "")
    return int(found.group(1)) if found else 0
