"""MWMS with TensorFlow's own preemption protocol, written as TF's failure-handling guide writes it.

A plain ``MultiWorkerMirroredStrategy`` custom training loop (Keras 3 layers and optimizer, an MLP on
scikit-learn's bundled digits) whose model and optimizer are saved by
``tf.distribute.experimental.PreemptionCheckpointHandler``: on a SIGTERM to *any* task, every task
saves at one agreed step and exits with TF's restart code (42 off GCE). The handler restores the
latest checkpoint of ``--checkpoint-dir`` at start-up (non-chief tasks write to ``workertemp_<i>``
directories beside it, which they remove after saving), and ``handler.total_run_calls`` is where
training resumes; the data is positioned there, so with the seeds and op determinism below a
preempted and resumed run ends with the very weights of an uninterrupted one.

It imports nothing of tfcluster (``--termination-config`` aside, which passes
``worker.termination_config()``: tfcluster's grace period). Under tfcluster the checkpoint directory
defaults to ``TFCLUSTER_CHECKPOINT_DIR``; set ``health.startup_timeout_s`` and ``hang_timeout_s`` to
null, as it reports no steps to tfcluster. Every task prints ``[pch TASK] step N loss L`` every
``--log-every`` steps and, at the end, ``weights_sha256=...`` (the same on every task) and
``final_step=...``.

Keras 3 ``model.fit`` is broken under MWMS on TF 2.21, hence the custom loop.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

NUM_CLASSES = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker.examples.pch_digits",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data order and init")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TFCLUSTER_CHECKPOINT_DIR"),
                        help="where the chief's checkpoints go (default: $TFCLUSTER_CHECKPOINT_DIR, "
                             "else pch_digits in the temp directory)")
    parser.add_argument("--log-every", type=int, default=10, help="print a step line every N")
    parser.add_argument("--termination-config", action="store_true",
                        help="give the handler worker.termination_config() (tfcluster's grace "
                             "period) instead of TF's default")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.batch_size <= 0 or args.log_every <= 0:
        parser.error("--steps must be >= 0, --batch-size and --log-every > 0")
    args.checkpoint_dir = args.checkpoint_dir or os.path.join(tempfile.gettempdir(), "pch_digits")
    return args


def load_data() -> tuple[np.ndarray, np.ndarray]:
    """Digits (8x8 images, 1797 samples) scaled to [0, 1]."""
    from worker.examples.needs import need

    x, y = need("sklearn.datasets").load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y.astype(np.int32)


def batch_order(num_examples: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """Example indices of every step's global batch, shape (steps, batch_size): a seeded
    reshuffle per epoch, fixed by (seed, sizes) alone, so a restart at step N goes on exactly
    where step N left off."""
    rng = np.random.default_rng(seed)
    needed = steps * batch_size
    epochs = -(-needed // num_examples)
    order = np.concatenate([np.zeros(0, np.int64)]
                           + [rng.permutation(num_examples) for _ in range(epochs)])
    return order[:needed].reshape(steps, batch_size)


def make_dataset(x: np.ndarray, y: np.ndarray, args: argparse.Namespace, start: int) -> Any:
    """Global batches ``start+1 .. steps``: skipped *before* distribution (the distributed
    iterator cannot be checkpointed), then sharded by data across the workers."""
    import tensorflow as tf

    features, labels = tf.constant(x), tf.constant(y)
    dataset = (tf.data.Dataset.from_tensor_slices(batch_order(len(x), args.steps, args.batch_size,
                                                              args.seed))
               .skip(start)
               .map(lambda idx: (tf.gather(features, idx), tf.gather(labels, idx))))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return dataset.with_options(options)


def build_model(seed: int) -> Any:
    import keras

    def init(offset: int) -> Any:  # seeded: the same initial weights on every task and attempt
        return keras.initializers.GlorotUniform(seed=seed + offset)

    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(64, activation="relu", kernel_initializer=init(1)),
        keras.layers.Dense(64, activation="relu", kernel_initializer=init(2)),
        keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(3)),
    ])


def make_train_step(strategy: Any, model: Any, optimizer: Any, global_batch: int) -> Any:
    """One distributed step, a ``tf.function`` of the distributed iterator (what the handler's
    ``run`` calls: one step per call, as it requires under MWMS)."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica_step(features: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                              global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    def train_step(iterator: Any) -> Any:
        per_replica = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return tf.function(train_step)


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(np.asarray(weight.numpy())).tobytes())
    return digest.hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import tensorflow as tf

    # The strategy first: it sets up the collective runtime before any other op runs.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    task = f"{resolver.task_type}:{resolver.task_id}"
    import keras

    keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    x, y = load_data()
    with strategy.scope():
        model = build_model(args.seed)
        optimizer = keras.optimizers.Adam(learning_rate=args.learning_rate)
        optimizer.build(model.trainable_variables)  # before the handler restores into it
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    termination = None
    if args.termination_config:
        import worker  # the only tfcluster import, and only on request

        termination = worker.termination_config()
        print(f"[pch {task}] termination grace_period={termination.grace_period}", flush=True)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        resolver, checkpoint, args.checkpoint_dir, termination_config=termination)

    start = int(handler.total_run_calls)  # restored with the checkpoint: 0 on a fresh start
    print(f"[pch {task}] " + (f"resumed at step {start}" if start else "fresh start"), flush=True)
    dataset = make_dataset(x, y, args, start)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    train_step = make_train_step(strategy, model, optimizer, args.batch_size)
    for step in range(start + 1, args.steps + 1):
        # saves and exits (sys.exit(42)) here, at the agreed step, when any task got a SIGTERM
        loss = handler.run(train_step, iterator)
        if step % args.log_every == 0:
            print(f"[pch {task}] step {step} loss {float(loss):.4f}", flush=True)
    print(f"weights_sha256={weights_sha256(model)}", flush=True)
    print(f"final_step={max(start, args.steps)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
