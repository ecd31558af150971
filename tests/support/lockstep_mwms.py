"""A plain MultiWorkerMirroredStrategy script for the lock-step straggler tests: it imports nothing
of tfcluster (no step reports) and knows only TF_CONFIG and its arguments.

Each step all-reduces the gradients of a small MLP, so every task waits for the slowest one in
every step. ``--busy-task TASK`` (e.g. ``worker:1``) does ``--busy-ms`` milliseconds of CPU work
(numpy, outside TensorFlow) before each step: more work per step than its peers, the way an
expensive input pipeline or a side computation on one task would. The script trains for
``--seconds`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def busy(milliseconds: float) -> None:
    """Burn about ``milliseconds`` of one core's time."""
    end = time.thread_time() + milliseconds / 1000
    matrix = np.ones((64, 64))
    while time.thread_time() < end:
        matrix = np.tanh(matrix @ matrix)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--busy-task", default="")
    parser.add_argument("--busy-ms", type=float, default=20.0)
    args = parser.parse_args()
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    me = f"{resolver.task_type}:{resolver.task_id}"
    tasks = sum(len(v) for v in json.loads(os.environ["TF_CONFIG"])["cluster"].values())
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(32,)),
                                     tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)
        optimizer.build(model.trainable_variables)
    batch = 16 * tasks
    data = tf.data.Dataset.from_tensors((tf.ones((batch, 32)), tf.ones((batch, 1)))).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(data))

    def replica_step(features: tf.Tensor, labels: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(labels - model(features, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    @tf.function
    def train_step(it: object) -> None:
        strategy.run(replica_step, args=next(it))

    @tf.function
    def agreed(flag: tf.Tensor) -> tf.Tensor:
        """The sum of every task's ``flag`` (a collective, like every step's all-reduce)."""
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(tf.identity, args=(flag,)), axis=None)

    steps, end = 0, time.monotonic() + args.seconds
    while True:
        # every task stops at the same step: the first task's clock decides, through a collective
        first = me in ("chief:0", "worker:0")
        if float(agreed(tf.constant(float(first and time.monotonic() >= end)))) > 0:
            break
        if me == args.busy_task:
            busy(args.busy_ms)
        train_step(iterator)
        steps += 1
    print(f"[lockstep {me}] {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
