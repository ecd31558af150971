"""A plain MultiWorkerMirroredStrategy script, as TensorFlow's multi-worker tutorial writes one: it
imports nothing of tfcluster and knows only TF_CONFIG (read by the strategy) and its arguments.

A custom loop trains a small MLP on random-but-seeded data; every ``--save-every`` steps the chief
saves with ``tf.train.CheckpointManager`` into ``--checkpoint-dir`` and every other worker into a
temporary directory of its own that it removes (the tutorial's ``write_filepath`` convention).
Every task restores ``tf.train.latest_checkpoint(--checkpoint-dir)`` at start and goes on from
the step saved in it; global batches are skipped *before* distribution, so with op determinism a
restarted job ends with the very weights of an uninterrupted one. At the end every task prints
``weights_sha256=...`` and ``final_step=...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-every", type=int, default=30)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--step-time", type=float, default=0.0, help="extra time per step")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch size")
    return parser.parse_args()


def main() -> int:
    args = parse()
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    is_chief = resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}))
    tf.keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(7)
    x = rng.normal(size=(args.steps * args.batch_size, 16)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(16,)),
            tf.keras.layers.Dense(32, activation="relu",
                                  kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
            tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2)),
        ])
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    latest = tf.train.latest_checkpoint(args.checkpoint_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    start = int(step.numpy())
    print(f"[plain {resolver.task_type}:{resolver.task_id}] start at step {start}", flush=True)
    write_dir = args.checkpoint_dir if is_chief else tempfile.mkdtemp(prefix="plain-mwms-")
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=2)

    dataset = (tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
               .skip(start))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

    def replica_step(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                tf.square(labels - model(features, training=True))[:, 0],
                global_batch_size=args.batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(it: object) -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(replica_step, args=next(it)), axis=None)

    for number in range(start + 1, args.steps + 1):
        train_step(iterator)
        step.assign(number)
        if args.step_time:
            time.sleep(args.step_time)
        if number % args.save_every == 0:
            manager.save(checkpoint_number=number)  # every task: the save is a collective
            if not is_chief:
                shutil.rmtree(write_dir, ignore_errors=True)
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    print(f"weights_sha256={digest.hexdigest()}", flush=True)
    print(f"final_step={args.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
