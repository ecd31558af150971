"""MWMS example with Keras ``model.fit`` (tf_keras): an MLP on scikit-learn's bundled digits.

Run it under tfcluster (``python -m worker.examples.digits_keras``, env ``TF_USE_LEGACY_KERAS=1``)
or on its own. ``worker.keras.callbacks()`` reports every batch to tfcluster and backs the
training state up into the chief's checkpoint directory after every epoch (or every
``--backup-every N`` batches), so a restarted attempt resumes from the last backup. The input is
:func:`worker.data.resumable_input` positioned at the backup's step, so ``fit`` resumes on the
exact next batch, mid-epoch too: with ``--deterministic`` a job killed and restarted ends with
the same weights as one never interrupted. Every task prints ``test_accuracy=...``,
``weights_sha256=...`` and ``final_step=...`` at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

import worker
from worker.data import keras_resume_position, resumable_input
from worker.examples.digits import NUM_CLASSES, batch_order, load_data, weights_sha256


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker.examples.digits_keras",
                                     description=__doc__)
    parser.add_argument("--epochs", type=int, default=6, help="epochs (default 6)")
    parser.add_argument("--steps-per-epoch", type=int, default=40, help="(default 40)")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data order and init")
    parser.add_argument("--deterministic", action="store_true", help="enable TF op determinism")
    parser.add_argument("--backup-every", type=int, default=0, metavar="N",
                        help="back up every N batches (default 0: after every epoch)")
    parser.add_argument("--model-checkpoint", metavar="FILEPATH",
                        help="also save the model after every epoch (tf_keras ModelCheckpoint "
                             "through worker.saving.model_checkpoint), e.g. DIR/e{epoch}.h5")
    parser.add_argument("--export", metavar="PATH",
                        help="save the trained model at PATH (.keras, .h5, else a SavedModel)")
    args = parser.parse_args(argv)
    if args.epochs < 0 or args.steps_per_epoch <= 0 or args.batch_size <= 0 \
            or args.backup_every < 0:
        parser.error("--epochs must be >= 0, --steps-per-epoch and --batch-size > 0, "
                     "--backup-every >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = worker.context()
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras (before TF loads)

    import tensorflow as tf

    from worker.examples.needs import need

    tf_keras = need("tf_keras")  # before the strategy: a missing one is said in one line
    # The strategy must exist before any other TF op runs (it configures the collective runtime).
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    from worker.keras import callbacks
    from worker.saving import model_checkpoint

    tf_keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    x_train, y_train, x_test, y_test = load_data()
    features, labels = tf.constant(x_train), tf.constant(y_train)
    order = batch_order(len(x_train), max(1, args.epochs * args.steps_per_epoch),
                        args.batch_size, args.seed)
    # The backup fit() is about to restore was taken at this step: start the input there.
    start = keras_resume_position(ctx)
    dataset = resumable_input(
        strategy, lambda: tf.data.Dataset.from_tensor_slices(order).repeat(),  # never runs dry
        global_batch_size=args.batch_size, position=start,
        per_replica=lambda idx: (tf.gather(features, idx), tf.gather(labels, idx)))
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
    extra = [model_checkpoint(args.model_checkpoint)] if args.model_checkpoint else []
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
              callbacks=[*callbacks(ctx, save_freq=args.backup_every or "epoch"), *extra],
              verbose=0)
    if args.export:
        worker.save_model(model, args.export, ctx=ctx)  # every task; the chief's copy is kept

    logits = model(tf.constant(x_test), training=False)
    accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y_test))
    print(f"test_accuracy={accuracy:.4f}", flush=True)
    print(f"weights_sha256={weights_sha256(model)}", flush=True)
    print(f"final_step={int(model.optimizer.iterations.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
