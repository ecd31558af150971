"""ParameterServerStrategy example: an MLP on scikit-learn's bundled digits, trained by a
coordinator that schedules steps onto workers, its variables on parameter servers.

Under ParameterServerStrategy only the ``chief`` runs this training code; it is the *coordinator*.
It builds the model inside ``strategy.scope()`` (every variable lands on a ``ps`` task), gives
every ``worker`` its own copy of the input (``coordinator.create_per_worker_dataset``) and queues
training steps with ``coordinator.schedule``: each step runs on whichever worker is free, reads a
batch of that worker's input, and updates the variables on the parameter servers
(asynchronously: workers do not wait for each other). The workers and parameter servers only
serve: run as one of them, this script serves as ``python -m worker.server`` does.

Failures, as TensorFlow handles them:

- a worker dies: the coordinator runs its steps on the other workers, and uses it again once it
  is back at the same address. Nothing to do here;
- a parameter server dies: ``schedule``/``join`` raise ``tf.errors.UnavailableError`` and this
  script dies of it; tfcluster restarts the job, which resumes from the chief's last checkpoint;
- the chief dies: the same.

So the chief checkpoints into ``TFCLUSTER_CHECKPOINT_DIR`` every ``--save-every`` steps (after a
``coordinator.join()``, so that every scheduled step is in it) and resumes from
``TFCLUSTER_RESUME_CHECKPOINT`` (what tfcluster hands a restart), else from the latest
checkpoint there. ``optimizer.iterations``, a variable on a parameter server, is the step count.
Every finished step is reported to tfcluster (``worker.report(step, loss=...)``). At the end the
chief prints ``test_accuracy=...`` and ``final_step=...``.

Keras: the model and optimizer are tf_keras (Keras 2: :mod:`worker.examples.needs` says how to
install it), which supports ParameterServerStrategy. Keras 3 does not: its optimizer's
``iterations`` loses increments when two workers update it at once, so it cannot count steps.
``--keras-fit`` trains with tf_keras ``model.fit`` on a ``DatasetCreator`` instead of the custom
loop, checkpointing and reporting every ``--save-every`` steps.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import worker
from worker import server
from worker.examples.digits import NUM_CLASSES, load_data
from worker.reporting import send as report_send
from worker.wire.reports import ReportKind

#: Steps each scheduled function of ``model.fit`` runs (fewer round trips to the coordinator).
STEPS_PER_EXECUTION = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker.examples.ps_digits",
                                     description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="examples per step (one worker's batch; default 64)")
    parser.add_argument("--save-every", type=int, default=50,
                        help="checkpoint every N steps, and at the end (default 50)")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam (default 0.01)")
    parser.add_argument("--keras-fit", action="store_true",
                        help="train with tf_keras model.fit instead of the custom loop")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.batch_size <= 0 or args.save_every <= 0:
        parser.error("--steps must be >= 0, --batch-size and --save-every > 0")
    return args


def log(message: str) -> None:
    print(f"[ps_digits] {message}", file=sys.stderr, flush=True)


def make_dataset_fn(x: np.ndarray, y: np.ndarray, batch_size: int) -> Any:
    """The input of one worker: the training set, reshuffled every epoch, endless. Every worker
    runs this function itself (its own order), so no two read in step."""
    import tensorflow as tf

    def dataset_fn(_context: Any = None) -> Any:
        data = tf.data.Dataset.from_tensor_slices((x, y))
        return data.shuffle(len(x)).repeat().batch(batch_size, drop_remainder=True).prefetch(2)

    return dataset_fn


def build_model(keras: Any) -> Any:
    """A small MLP (64 -> 64 -> 64 -> 10 logits) of ``keras`` (tf_keras)."""
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(NUM_CLASSES),
    ])


def restore(ctx: worker.TaskContext, checkpoint: Any, manager: Any | None) -> str | None:
    """Restore the checkpoint tfcluster says to resume from, else the latest one; its path.
    A checkpoint that cannot be restored is reported (tfcluster then tries an older one)."""
    path = ctx.resume_checkpoint or (manager.latest_checkpoint if manager else None)
    if path is None:
        return None
    try:
        checkpoint.restore(path).assert_existing_objects_matched()
    except Exception as exc:
        report_send({"kind": ReportKind.RESTORE_FAILED.value, "checkpoint": path,
                     "error": str(exc)[:2000]})
        raise
    return str(path)


@dataclass(frozen=True)
class Training:
    """What the chief trains with, either way: the strategy, the model and its optimizer (on the
    parameter servers), each worker's input and where checkpoints go."""

    strategy: Any
    model: Any
    optimizer: Any
    dataset_fn: Any
    num_workers: int
    #: The chief's ``tf.train.CheckpointManager``; None without a checkpoint directory.
    manager: Any | None

    def save(self, step: int) -> None:
        """Checkpoint the variables after ``step`` steps (once every scheduled step has run)."""
        if self.manager is not None:
            self.manager.save(checkpoint_number=step)


def train_custom_loop(args: argparse.Namespace, training: Training, start: int) -> None:
    """Steps ``start+1 .. --steps`` with ``coordinator.schedule``, a checkpoint every
    ``--save-every`` steps and every finished step reported."""
    import tensorflow as tf
    import tf_keras

    strategy, model, optimizer = training.strategy, training.model, training.optimizer

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    # Built on every worker (and again on a worker that comes back after a failure).
    per_worker_dataset = coordinator.create_per_worker_dataset(
        tf.function(lambda: strategy.distribute_datasets_from_function(training.dataset_fn)))
    iterator = iter(per_worker_dataset)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.NONE)

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    def step_fn(it: Any) -> tf.Tensor:
        x, y = next(it)  # this worker's next batch
        losses = strategy.run(replica_step, args=(x, y))  # the worker's replicas (one on a CPU)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    train_step = tf.function(step_fn)

    # schedule() returns at once with a RemoteValue: steps run while more are queued. Fetching a
    # step's loss waits for it, so report a step only once REPORT_LAG later ones are queued: the
    # workers always have work, and the reports still come in step order.
    report_lag = 4 * training.num_workers
    pending: collections.deque[tuple[int, Any]] = collections.deque()

    def report_finished(keep: int) -> None:
        while len(pending) > keep:
            step, loss = pending.popleft()
            worker.report(step, loss=float(loss.fetch()))

    for step in range(start + 1, args.steps + 1):
        pending.append((step, coordinator.schedule(train_step, args=(iterator,))))
        report_finished(report_lag)
        if step % args.save_every == 0 or step == args.steps:
            coordinator.join()  # every scheduled step has run: the checkpoint holds them all
            report_finished(0)
            training.save(step)


def train_keras_fit(args: argparse.Namespace, training: Training, start: int) -> None:
    """Steps ``start+1 .. --steps`` with tf_keras ``model.fit`` (which makes its own
    ClusterCoordinator), in calls of ``--save-every`` steps: a checkpoint and a report after
    each."""
    import tf_keras

    model = training.model
    with training.strategy.scope():
        model.compile(optimizer=training.optimizer, steps_per_execution=STEPS_PER_EXECUTION,
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # A DatasetCreator is how model.fit takes input under ParameterServerStrategy: fit calls
    # dataset_fn on every worker, as create_per_worker_dataset does.
    data = tf_keras.utils.experimental.DatasetCreator(training.dataset_fn)
    step = start
    while step < args.steps:
        steps = min(args.save_every, args.steps - step)
        history = model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
        step += steps
        worker.report(step, loss=history.history["loss"][-1])
        training.save(step)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = worker.context()
    if ctx.task_type in server.SERVED_TYPES:  # a worker or parameter server only serves
        server.run([])
    # A dead worker or ps fails an RPC at once instead of being waited for: how the coordinator
    # notices it ("use_caller" is TensorFlow's default too; TF's own examples set it).
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    import tensorflow as tf

    from worker.examples.needs import need

    tf_keras = need("tf_keras")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()  # reads TF_CONFIG
    cluster = resolver.cluster_spec()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    x_train, y_train, x_test, y_test = load_data()

    with strategy.scope():  # every variable created here lives on a parameter server
        model = build_model(tf_keras)
        optimizer = tf_keras.optimizers.Adam(learning_rate=args.learning_rate)
        optimizer.build(model.trainable_variables)  # its slots exist before the restore

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    own_dir = ctx.checkpoint_dir  # the chief's: TFCLUSTER_CHECKPOINT_DIR
    manager = tf.train.CheckpointManager(checkpoint, own_dir, max_to_keep=3) if own_dir else None
    restored = restore(ctx, checkpoint, manager)
    start = int(optimizer.iterations.numpy())
    log(f"{cluster.num_tasks('worker')} worker(s), {cluster.num_tasks('ps')} ps, attempt "
        f"{ctx.attempt}, " + (f"resumed at step {start} from {restored}" if restored
                              else "fresh start"))

    training = Training(strategy, model, optimizer,
                        make_dataset_fn(x_train, y_train, args.batch_size),
                        cluster.num_tasks("worker"), manager)
    if args.keras_fit:
        train_keras_fit(args, training, start)
    else:
        train_custom_loop(args, training, start)

    # The coordinator reads the variables from the parameter servers to evaluate.
    logits = model(tf.constant(x_test), training=False)
    accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y_test))
    print(f"test_accuracy={accuracy:.4f}", flush=True)
    print(f"final_step={max(start, args.steps)}", flush=True)
    log(f"optimizer.iterations={int(optimizer.iterations.numpy())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
