"""MWMS example with Keras ``model.fit`` (tf_keras): an MLP on scikit-learn's bundled digits.

Run it under tfcluster (``python -m worker.examples.digits_keras``, env ``TF_USE_LEGACY_KERAS=1``)
or on its own. ``worker.keras.callbacks()`` reports every batch to tfcluster and backs the
training state up into the chief's checkpoint directory after every epoch, so a restarted attempt
resumes from the last completed epoch. Every task prints ``test_accuracy=...`` and
``final_step=...`` at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

import worker
from worker.examples.digits import NUM_CLASSES, load_data


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker.examples.digits_keras",
                                     description=__doc__)
    parser.add_argument("--epochs", type=int, default=6, help="epochs (default 6)")
    parser.add_argument("--steps-per-epoch", type=int, default=40, help="(default 40)")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data order and init")
    args = parser.parse_args(argv)
    if args.epochs < 0 or args.steps_per_epoch <= 0 or args.batch_size <= 0:
        parser.error("--epochs must be >= 0, --steps-per-epoch and --batch-size > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = worker.context()
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras (before TF loads)

    import tensorflow as tf

    # The strategy must exist before any other TF op runs (it configures the collective runtime).
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import tf_keras

    from worker.keras import callbacks

    tf_keras.utils.set_random_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
               .shuffle(len(x_train), seed=args.seed).repeat().batch(args.batch_size)
               .with_options(options))
    with strategy.scope():
        model = tf_keras.Sequential([
            tf_keras.Input(shape=(64,)),
            tf_keras.layers.Dense(64, activation="relu"),
            tf_keras.layers.Dense(64, activation="relu"),
            tf_keras.layers.Dense(NUM_CLASSES),
        ])
        model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=args.learning_rate),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
              callbacks=callbacks(ctx), verbose=0)

    logits = model(tf.constant(x_test), training=False)
    accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y_test))
    print(f"test_accuracy={accuracy:.4f}", flush=True)
    print(f"final_step={int(model.optimizer.iterations.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
