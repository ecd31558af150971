"""A tiny stand-in for an MWMS training script that imports no TensorFlow (tests, benchmarks).

It behaves like a real task where that matters to the launcher: it reads TF_CONFIG through
``worker.context()``, can bind its own cluster address as TensorFlow's gRPC server would, reports
every step through ``worker.report``, writes checkpoints in ``tf.train.CheckpointManager``'s layout
when it is the chief, resumes from ``TFCLUSTER_RESUME_STEP``, and fails on request in the ways real
tasks fail (exit code, signal, exception, hang), optionally only on given attempts.

With ``--result`` it carries a training state (a hash chained over every step it runs), saves it
beside each checkpoint (``ckpt-N.result``), restores it on resume, and prints
``tfcluster-result: sha256=...`` at the end: the same value for an uninterrupted run and for one
that was restarted from checkpoints correctly. With ``--save-on-term`` a SIGTERM is a graceful
preemption: the task finishes its step, the chief saves a checkpoint there, and it exits 143.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time

import worker
from worker import reporting
from worker.wire.signals import STACK_DUMP_SIGNAL as SLOW_DUMP_SIGNAL

GRPC_BIND_ERROR = (
    "tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server"
)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-time", type=float, default=0.01, help="simulated work per step")
    parser.add_argument("--bind", action="store_true", help="listen on our TF_CONFIG address")
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--fail-task", default="",
                        help="task id that fails, e.g. worker:1, or 'all'")
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser.add_argument("--fail-mode", default="exit:1",
                        help="exit:N | signal:NAME | raise | hang | grpc-bind | preempt "
                        "(the chief saves a checkpoint at this step, every task exits 143) | "
                        "hang-slow-dump:S (a hang whose stack dump is written S seconds after it "
                        "is asked for, as on a loaded machine)")
    parser.add_argument("--fail-attempts", default="",
                        help="comma-separated attempts on which to fail (default: every one)")
    parser.add_argument("--spawn-child", action="store_true", help="start a sleeping child")
    parser.add_argument("--spawn-daemon", action="store_true",
                        help="start a grandchild that leaves our session (double fork + setsid)")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    parser.add_argument("--pid-file-dir", default="", help="write <task>.pid files here")
    parser.add_argument("--ignore-resume-task", default="",
                        help="this task starts from step 0 whatever it is told (misconfiguration)")
    parser.add_argument("--result", action="store_true",
                        help="carry a chained state, checkpoint it, print tfcluster-result:")
    parser.add_argument("--save-on-term", action="store_true",
                        help="SIGTERM: save a checkpoint at the current step and exit 143")
    return parser.parse_args()


RESULT_SEED = hashlib.sha256(b"fake_trainer").hexdigest()


def next_state(state: str, step: int) -> str:
    """The training state after ``step`` (a hash chain: it depends on every step run, in order)."""
    return hashlib.sha256(f"{state}:{step}".encode()).hexdigest()


def save_state(directory: str, step: int, state: str) -> None:
    """The state beside checkpoint ``step``, written before the checkpoint itself."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"ckpt-{step}.result"), "w") as handle:
        handle.write(state)


def restored_state(ctx: worker.TaskContext) -> str:
    if ctx.resume_checkpoint is None:
        return RESULT_SEED
    with open(ctx.resume_checkpoint + ".result") as handle:
        return handle.read().strip()


def bind_own_address(ctx: worker.TaskContext) -> socket.socket | None:
    raw = os.environ.get("TF_CONFIG")
    if not raw or ctx.task.type == "evaluator":
        return None
    import json

    config = json.loads(raw)
    address = config["cluster"][ctx.task.type][ctx.task.index]
    port = int(address.rsplit(":", 1)[1])
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("0.0.0.0", port))
    except OSError as exc:
        print(f"{GRPC_BIND_ERROR} ({exc})", file=sys.stderr, flush=True)
        sys.exit(1)
    server.listen()
    return server


def write_checkpoint(directory: str, step: int) -> None:
    """Files laid out as tf.train.CheckpointManager writes them (contents are not TF's): the
    data and index files first, then the ``checkpoint`` state file listing every checkpoint."""
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, f"ckpt-{step}")
    for suffix in (".data-00000-of-00001", ".index"):
        with open(prefix + suffix, "w") as handle:
            handle.write(f"step {step}\n")
    steps = sorted(int(n[5:-6]) for n in os.listdir(directory)
                   if n.startswith("ckpt-") and n.endswith(".index"))
    lines = [f'model_checkpoint_path: "ckpt-{step}"']
    lines += [f'all_model_checkpoint_paths: "ckpt-{s}"' for s in steps]
    state = os.path.join(directory, "checkpoint")
    with open(state + ".tmp", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(state + ".tmp", state)


def restore(ctx: worker.TaskContext) -> int:
    """Check the resume checkpoint like a real restore would; report and fail if it is bad."""
    if ctx.resume_checkpoint is None:
        return 0
    data = ctx.resume_checkpoint + ".data-00000-of-00001"
    try:
        with open(data) as handle:
            content = handle.read()
    except OSError as exc:
        content = str(exc)
    if content != f"step {ctx.resume_step}\n":
        reporting.send({"kind": "restore_failed", "checkpoint": ctx.resume_checkpoint,
                        "error": f"unreadable data file: {content[:80]!r}"})
        raise SystemExit(f"fake_trainer: cannot restore {ctx.resume_checkpoint}")
    return ctx.resume_step or 0


def fail(mode: str) -> None:
    kind, _, arg = mode.partition(":")
    print(f"fake_trainer: failing now ({mode})", file=sys.stderr, flush=True)
    if kind == "exit":
        sys.exit(int(arg or 1))
    if kind == "signal":
        os.kill(os.getpid(), signal.Signals["SIG" + arg.upper().removeprefix("SIG")])
    if kind == "raise":
        raise RuntimeError("fake_trainer: simulated crash in the training step")
    if kind == "grpc-bind":
        print(GRPC_BIND_ERROR, file=sys.stderr, flush=True)
        sys.exit(1)
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "hang-slow-dump":  # SLOW_DUMP_SIGNAL is blocked in every thread since main()
        while SLOW_DUMP_SIGNAL not in signal.sigpending():
            time.sleep(0.01)
        time.sleep(float(arg))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {SLOW_DUMP_SIGNAL})  # the dump is written now
        while True:
            time.sleep(3600)
    raise SystemExit(f"unknown fail mode {mode!r}")


def main() -> None:
    args = parse()
    if args.fail_mode.startswith("hang-slow-dump:"):  # before any thread starts: all inherit it
        signal.pthread_sigmask(signal.SIG_BLOCK, {SLOW_DUMP_SIGNAL})
    ctx = worker.context()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.pid_file_dir:
        with open(os.path.join(args.pid_file_dir, f"{ctx.task.file_stem}.pid"), "w") as handle:
            handle.write(str(os.getpid()))
    server = bind_own_address(ctx) if args.bind else None
    children = []
    if args.spawn_child:
        children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
    if args.spawn_daemon:
        code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n")
        subprocess.run([sys.executable, "-c", code], check=True)
    attempts = {int(a) for a in args.fail_attempts.split(",") if a.strip()}
    fails_here = args.fail_task in (str(ctx.task), "all") and (not attempts or ctx.attempt in attempts)
    start = 0 if str(ctx.task) == args.ignore_resume_task else restore(ctx)
    state = restored_state(ctx) if args.result and start else RESULT_SEED
    terms: list[int] = []
    if args.save_on_term:
        signal.signal(signal.SIGTERM, lambda signum, _frame: terms.append(signum))
    print(f"fake_trainer {ctx.task} attempt {ctx.attempt} starting at step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        if fails_here and step == args.fail_at_step:
            if args.fail_mode == "preempt":
                if ctx.is_chief and ctx.checkpoint_dir:
                    write_checkpoint(ctx.checkpoint_dir, step - 1)
                args.fail_mode = "exit:143"
            fail(args.fail_mode)
        time.sleep(args.step_time)
        state = next_state(state, step)
        worker.report(step, loss=1.0 / step)
        saving = bool(args.checkpoint_every and step % args.checkpoint_every == 0) or bool(terms)
        if ctx.is_chief and ctx.checkpoint_dir and saving:
            if args.result:
                save_state(ctx.checkpoint_dir, step, state)
            write_checkpoint(ctx.checkpoint_dir, step)
        if terms:
            print(f"fake_trainer {ctx.task}: preempted, saved at step {step}", flush=True)
            sys.exit(143)
    if fails_here and args.fail_at_step > args.steps:
        fail(args.fail_mode)
    print(f"fake_trainer {ctx.task} done step={args.steps}", flush=True)
    if args.result and ctx.is_chief:
        print(f"tfcluster-result: sha256={state}", flush=True)
    if server is not None:
        server.close()


if __name__ == "__main__":
    main()
