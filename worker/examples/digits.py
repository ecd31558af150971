"""MWMS example: an MLP on scikit-learn's bundled digits, with a custom training loop.

Run it under tfcluster (``python -m worker.examples.digits``) or on its own (one task). Every
task prints ``test_accuracy=...``, ``weights_sha256=...`` and ``final_step=...`` at the end; the
weights hash is the same on every task, and with ``--deterministic`` the same across runs,
restarts and preemptions included.

A ``SIGTERM`` to any task is a graceful preemption: every task stops at the same step, the chief
saves a checkpoint there, and every task exits with ``worker.wire.env.PREEMPTION_EXIT_CODE`` (143);
tfcluster then restarts the job from that step without counting it against ``max_restarts``.

Keras 3 ``model.fit`` is broken under MultiWorkerMirroredStrategy on TF 2.21, so this uses the
custom loop (``strategy.run`` + ``tf.GradientTape``) with Keras 3 layers and optimizer.

The input comes from :func:`worker.data.resumable_input`, positioned by the restored step.
``--accumulate K`` applies the mean gradient of K batches every K steps (a step is one batch);
the accumulated sums are all-reduced first and checkpointed (:mod:`worker.accumulation`), so a
job stopped mid-accumulation resumes exactly. ``--mixed-precision`` trains in ``mixed_float16``
with a ``LossScaleOptimizer`` whose dynamic scale is checkpointed with the optimizer; it prints
``loss_scale=...`` at the end. ``--export DIR`` saves the trained model as a SavedModel (serving
``serve``) with :func:`worker.save_model`: the chief's copy at DIR, recorded in ``summary.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import worker
from worker.accumulation import gradient_accumulator
from worker.checkpointing import TrainingCheckpoint
from worker.data import resumable_input
from worker.wire.env import PREEMPTION_EXIT_CODE

if TYPE_CHECKING:
    import tensorflow as tf

NUM_CLASSES = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker.examples.digits", description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    parser.add_argument("--checkpoint-every", type=int, default=50,
                        help="save every N steps, 0: only at the end (default 50)")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam (default 0.01)")
    parser.add_argument("--deterministic", action="store_true",
                        help="seed everything and enable TF op determinism")
    parser.add_argument("--seed", type=int, default=0, help="seed for data order and init")
    parser.add_argument("--preemption-check-every", type=int, default=None, metavar="N",
                        help="agree on a preemption notice every N steps (default: about every "
                             "0.25 s of training)")
    parser.add_argument("--no-helpers", action="store_true",
                        help="no worker.report and no preemption check (what the helpers cost: "
                             "benchmarks/throughput.py)")
    parser.add_argument("--log-every", type=int, default=0, metavar="N",
                        help="print 'step N loss L' every N steps (default 0: never)")
    parser.add_argument("--accumulate", type=int, default=1, metavar="K",
                        help="apply the mean gradient of K batches every K steps (default 1)")
    parser.add_argument("--mixed-precision", action="store_true",
                        help="mixed_float16 with a LossScaleOptimizer")
    parser.add_argument("--loss-scale-growth-steps", type=int, default=2000, metavar="N",
                        help="double the loss scale after N finite steps (default 2000)")
    parser.add_argument("--export", metavar="DIR",
                        help="save the trained model as a SavedModel at DIR (the chief's copy)")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.batch_size <= 0 or (args.preemption_check_every or 1) <= 0 \
            or args.accumulate <= 0 or args.log_every < 0:
        parser.error("--steps and --log-every must be >= 0, --batch-size, "
                     "--preemption-check-every and --accumulate > 0")
    return args


def log(ctx: worker.TaskContext, message: str) -> None:
    print(f"[digits {ctx.task}] {message}", file=sys.stderr, flush=True)


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits (8x8 images, 1797 samples) scaled to [0, 1]; a fixed stratified 20% test split."""
    from worker.examples.needs import need

    load_digits = need("sklearn.datasets").load_digits
    train_test_split = need("sklearn.model_selection").train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y
    )
    return x_train, y_train, x_test, y_test


def batch_order(num_examples: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """Example indices for every step, shape (steps, batch_size): a seeded reshuffle per epoch.

    Fixed by (seed, sizes) alone, so every task of every attempt sees the same batches and a
    restart at step N continues exactly where step N left off.
    """
    rng = np.random.default_rng(seed)
    needed = steps * batch_size
    epochs = -(-needed // num_examples)
    order = np.concatenate([np.zeros(0, np.int64)]
                           + [rng.permutation(num_examples) for _ in range(epochs)])
    return order[:needed].astype(np.int64).reshape(steps, batch_size)


def make_input(
    strategy: Any, x: np.ndarray, y: np.ndarray, *, steps: int, batch_size: int, seed: int,
    start: int
) -> Any:
    """Global batches ``start+1 .. steps`` (:func:`batch_order`), each worker gathering only its
    replicas' slice of every batch (:func:`worker.data.resumable_input`)."""
    import tensorflow as tf

    features, labels = tf.constant(x), tf.constant(y)
    order = batch_order(len(x), steps, batch_size, seed)
    return resumable_input(
        strategy, lambda: tf.data.Dataset.from_tensor_slices(order), global_batch_size=batch_size,
        position=start, per_replica=lambda idx: (tf.gather(features, idx), tf.gather(labels, idx)))


def build_model(seed: int | None) -> Any:
    """A small MLP; ``seed`` (deterministic runs) seeds every initializer."""
    import keras

    def init(offset: int) -> Any:
        return keras.initializers.GlorotUniform(seed=None if seed is None else seed + offset)

    return keras.Sequential(
        [
            keras.Input(shape=(64,)),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init(1)),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init(2)),
            # float32 logits under mixed precision: a stable softmax and loss
            keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(3), dtype="float32"),
        ]
    )


def make_train_step(strategy: Any, model: Any, optimizer: Any, global_batch: int,
                    accumulator: Any | None) -> Any:
    """One distributed training step as a ``tf.function`` of the distributed iterator. With an
    ``accumulator`` the step only adds the (all-reduced) gradients: see :func:`make_apply_step`."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def replica_step(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(labels, logits),
                                              global_batch_size=global_batch)
            objective = optimizer.scale_loss(loss) if scaled else loss
        grads = tape.gradient(objective, model.trainable_variables)
        if accumulator is not None:
            accumulator.add(grads)
        else:  # Keras 3's optimizer all-reduces (SUM) the gradients across replicas itself.
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    def distributed_step(it: Any) -> tf.Tensor:
        features, labels = next(it)
        per_replica = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return tf.function(distributed_step)


def make_apply_step(strategy: Any, model: Any, optimizer: Any, accumulator: Any,
                    k: int) -> Any:
    """Apply the mean of the last ``k`` steps' accumulated gradients and zero the sums. The sums
    are the same on every task, so a LossScaleOptimizer's finite check agrees everywhere."""
    import tensorflow as tf

    def replica_apply() -> None:
        grads = accumulator.gradients(k)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        accumulator.reset()

    return tf.function(lambda: strategy.run(replica_apply))


def build_training(strategy: Any, args: argparse.Namespace) -> tuple[Any, Any, Any | None]:
    """The model, its optimizer (a LossScaleOptimizer with ``--mixed-precision``) and the
    gradient accumulator (None without ``--accumulate``/``--mixed-precision``), in scope."""
    import keras

    with strategy.scope():
        model = build_model(args.seed if args.deterministic else None)
        # Keras 3 optimizers bind to the strategy current at construction: create inside scope.
        optimizer = keras.optimizers.Adam(learning_rate=args.learning_rate)
        if args.mixed_precision:
            optimizer = keras.optimizers.LossScaleOptimizer(
                optimizer, dynamic_growth_steps=args.loss_scale_growth_steps)
        optimizer.build(model.trainable_variables)  # before restore: no deferred restoration
        # Mixed precision goes through the accumulator too (K=1): a LossScaleOptimizer checks the
        # gradients it is given for inf/NaN, and only all-reduced ones agree on every task.
        accumulate = args.accumulate > 1 or args.mixed_precision
        accumulator = gradient_accumulator(model.trainable_variables) if accumulate else None
    return model, optimizer, accumulator


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(np.asarray(weight.numpy())).tobytes())
    return digest.hexdigest()


def after_step(args: argparse.Namespace, ctx: worker.TaskContext, ckpt: TrainingCheckpoint,
               step: int, loss: float) -> bool:
    """Log, report the step and check for a preemption notice; True: stop here (it was saved)."""
    if args.log_every and step % args.log_every == 0:
        print(f"[digits {ctx.task}] step {step} loss {loss:.4f}", flush=True)
    if args.no_helpers:
        return False
    worker.report(step, loss=loss)
    if not ckpt.preempted(step):
        return False
    log(ctx, f"preempted: checkpoint saved at step {step}, exiting {PREEMPTION_EXIT_CODE}")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = worker.context()

    import tensorflow as tf

    # The strategy must exist before any other TF op runs (it configures the collective runtime).
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    log(ctx, f"cluster {json.dumps(resolver.cluster_spec().as_dict(), sort_keys=True)} "
             f"task {resolver.task_type}:{resolver.task_id}")
    import keras

    if args.deterministic:
        keras.utils.set_random_seed(args.seed)  # python, numpy, TF (and Keras 3's own) seeds
        tf.config.experimental.enable_op_determinism()
    if args.mixed_precision:
        keras.mixed_precision.set_dtype_policy("mixed_float16")

    x_train, y_train, x_test, y_test = load_data()
    model, optimizer, accumulator = build_training(strategy, args)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    extra = {} if accumulator is None else {"accumulator": accumulator}
    ckpt = TrainingCheckpoint(ctx, step_var, strategy=strategy,
                              preemption_check_every=args.preemption_check_every,
                              model=model, optimizer=optimizer, **extra)

    start = ckpt.restore()
    log(ctx, f"{ctx.num_workers} worker(s), attempt {ctx.attempt}, "
             + (f"resumed at step {start} from {ckpt.restored_from}" if ckpt.restored_from
                else "fresh start"))

    iterator = iter(make_input(strategy, x_train, y_train, steps=args.steps,
                               batch_size=args.batch_size, seed=args.seed, start=start))
    train_step = make_train_step(strategy, model, optimizer, args.batch_size, accumulator)
    apply_step = None if accumulator is None else make_apply_step(
        strategy, model, optimizer, accumulator, args.accumulate)

    began = time.monotonic()
    last_saved = start if ckpt.restored_from else None
    for step in range(start + 1, args.steps + 1):
        loss = float(train_step(iterator))
        if apply_step is not None and step % args.accumulate == 0:
            apply_step()
        if ckpt.maybe_save(step, args.checkpoint_every) is not None:
            last_saved = step
        if after_step(args, ctx, ckpt, step, loss):  # every task stops at this step, saved
            return PREEMPTION_EXIT_CODE
    final_step = max(start, args.steps)
    if final_step > 0 and last_saved != final_step:
        ckpt.save(final_step)  # every task, like every save
    elapsed = time.monotonic() - began
    if args.export:
        exported = worker.save_model(model, args.export, ctx=ctx)  # every task, like a save
        if exported:
            log(ctx, f"exported the model to {exported}")

    logits = model(tf.constant(x_test), training=False)
    accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y_test))
    log(ctx, f"trained steps {start + 1}..{args.steps} in {elapsed:.1f}s" if start < args.steps
        else f"nothing to train: checkpoint is at step {start} >= --steps {args.steps}")
    print(f"test_accuracy={accuracy:.4f}", flush=True)
    print(f"weights_sha256={weights_sha256(model)}", flush=True)
    print(f"final_step={final_step}", flush=True)
    if args.mixed_precision:
        print(f"loss_scale={float(optimizer.dynamic_scale.numpy()):g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
