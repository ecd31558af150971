"""Gradient accumulation under MultiWorkerMirroredStrategy that a checkpoint captures exactly.

Keras 3's own ``gradient_accumulation_steps`` adds each worker's *local* gradients into its own
copy of the accumulators. Only the chief's copy is checkpointed and every task restores it, so a
job restarted mid-accumulation resumes with every other worker's partial sums replaced by the
chief's: the run diverges from an uninterrupted one. :func:`gradient_accumulator` all-reduces the
gradients first and accumulates the sums, so the accumulators are identical on every task and the
chief's checkpoint holds the whole state. Put it in the checkpoint next to the optimizer::

    with strategy.scope():
        accumulator = gradient_accumulator(model.trainable_variables)
    ckpt = TrainingCheckpoint(ctx, step, model=model, optimizer=optimizer,
                              accumulator=accumulator)

    def replica_step(x, y):                 # inside strategy.run, every micro-batch
        ...
        accumulator.add(tape.gradient(loss, model.trainable_variables))

    def replica_apply():                    # inside strategy.run, every K micro-batches
        optimizer.apply_gradients(zip(accumulator.gradients(k), variables))
        accumulator.reset()

TensorFlow is imported lazily: importing this module never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["gradient_accumulator"]

_classes: dict[str, type] = {}


def gradient_accumulator(variables: Sequence[Any]) -> Any:
    """A ``tf.Module`` of zeroed accumulators shaped like ``variables`` (float32); create it in
    ``strategy.scope()``. Its methods run in replica context (inside ``strategy.run``):

    - ``add(grads)``: all-reduce (sum) ``grads`` across replicas and add them;
    - ``gradients(k)``: what to hand an optimizer that all-reduces (sums) gradients itself, as
      Keras 3's does: the sum over ``k`` micro-batches divided by ``k`` and by the number of
      replicas, so that the optimizer's sum is the mean gradient of the ``k`` micro-batches;
    - ``reset()``: zero the accumulators.
    """
    return _accumulator_class()(list(variables))


def _accumulator_class() -> type:
    if "accumulator" in _classes:
        return _classes["accumulator"]
    import tensorflow as tf

    class GradientAccumulator(tf.Module):  # type: ignore[misc]
        """Mirrored sums of all-reduced gradients (identical on every replica)."""

        def __init__(self, variables: list[Any]) -> None:
            super().__init__(name="gradient_accumulator")
            self.sums = [
                tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                            name=f"accumulated_{i}",
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                for i, v in enumerate(variables)]

        def add(self, grads: Sequence[Any]) -> None:
            context = tf.distribute.get_replica_context()
            summed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                        [tf.cast(g, tf.float32) for g in grads])
            for total, grad in zip(self.sums, summed, strict=True):
                total.assign_add(grad)

        def gradients(self, k: int) -> list[Any]:
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scale = tf.constant(float(k * replicas), tf.float32)
            return [tf.identity(total) / scale for total in self.sums]

        def reset(self) -> None:
            for total in self.sums:
                total.assign(tf.zeros_like(total))

    _classes["accumulator"] = GradientAccumulator
    return GradientAccumulator
