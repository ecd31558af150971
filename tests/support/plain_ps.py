"""A plain ParameterServerStrategy coordinator, as TensorFlow's parameter server tutorial writes
one: it imports nothing of tfcluster (only TensorFlow and the standard library) and knows only
TF_CONFIG (read by ``TFConfigClusterResolver``) and its arguments. It runs as the ``chief``; the
workers and parameter servers are plain ``tf.distribute.Server`` processes.

It fits a linear model (8 weights and a bias, on the parameter servers) to a synthetic,
deterministic regression by plain SGD: every step is one ``coordinator.schedule`` of a
``tf.function`` that reads the next batch of its worker's dataset, applies one SGD step and adds 1
to the ``global_step`` variable (on a parameter server too). A worker that dies is TensorFlow's
business: ``ClusterCoordinator`` runs its scheduled steps on the others (and on it again once it
is back). A parameter server that dies makes ``schedule``/``join`` raise (``UnavailableError``):
the script dies of it, with its traceback, to be restarted.

Every ``--save-every`` steps, and at the end, it joins (waits for every scheduled step), prints
``step S loss L`` and saves ``tf.train.CheckpointManager`` checkpoints into ``--checkpoint-dir``;
it restores the latest one at start (printing ``resumed at step K``) and schedules only the steps
left to ``--steps``. It ends with ``done steps=N global_step=G``: N the steps scheduled over all
runs, G the updates the parameter servers saw (more than N only if a step that a dying worker had
already applied ran again elsewhere). ``--step-sleep`` paces the scheduling so that a test can kill
things mid-run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

FEATURES = 8
LEARNING_RATE = 0.05


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--batch-size", type=int, default=16, help="per worker")
    parser.add_argument("--step-sleep", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long after scheduling each step")
    args = parser.parse_args()
    if args.steps < 0 or args.save_every <= 0 or args.batch_size <= 0 or args.step_sleep < 0:
        parser.error("--steps and --step-sleep must be >= 0, --save-every and --batch-size > 0")
    return args


def main() -> int:
    args = parse()
    # Connection errors raise at once (rather than wait for the peer): how the coordinator
    # learns that a worker or a parameter server died. Before TensorFlow starts any RPC.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():  # variables live on the parameter servers
        weights = tf.Variable(tf.zeros([FEATURES, 1]), name="weights")
        bias = tf.Variable(0.0, name="bias")
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(weights=weights, bias=bias, global_step=global_step)
    manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    start = int(global_step.numpy())
    if manager.latest_checkpoint:
        print(f"resumed at step {start} from {manager.latest_checkpoint}", flush=True)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        """The same endless stream of batches of y = x.w + 0.5 on every worker."""
        true_w = tf.reshape(tf.range(1.0, FEATURES + 1.0) / FEATURES, [FEATURES, 1])
        x = tf.random.stateless_normal([1024, FEATURES], seed=[7, 11])
        y = tf.matmul(x, true_w) + 0.5
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch_size)

    def per_worker_dataset_fn() -> tf.distribute.DistributedDataset:
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(tf.function(per_worker_dataset_fn)))

    def train_step(it: tf.distribute.DistributedIterator) -> tf.Tensor:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
            grad_w, grad_b = tape.gradient(loss, [weights, bias])
            weights.assign_sub(LEARNING_RATE * grad_w)
            bias.assign_sub(LEARNING_RATE * grad_b)
            global_step.assign_add(1)
            return loss

        x, y = next(it)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN,
                               strategy.run(replica_step, args=(x, y)), axis=None)

    train_fn = tf.function(train_step)

    began = time.monotonic()
    step = start
    while step < args.steps:
        last_loss = coordinator.schedule(train_fn, args=(iterator,))
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step % args.save_every == 0 or step == args.steps:
            coordinator.join()  # every scheduled step has run (on some worker)
            print(f"step {step} loss {float(last_loss.fetch()):.4f}", flush=True)
            manager.save(checkpoint_number=step)
    coordinator.join()
    print(f"trained steps {start + 1}..{args.steps} in {time.monotonic() - began:.1f}s"
          if start < args.steps else f"nothing to train: at step {start}", flush=True)
    print(f"done steps={max(start, args.steps)} global_step={int(global_step.numpy())}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
