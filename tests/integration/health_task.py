"""A training task for the health tests (no TensorFlow): it reports a step every ``--step-time``
seconds for ``--duration`` seconds; ``--slow-task`` runs ``--slow-factor`` times slower;
``--grow-task`` allocates ``--grow-mib`` MiB (touched, so resident) after ``--grow-after`` steps,
holds it, and with ``--kill-after-grow S`` SIGKILLs itself S seconds later, as the kernel's OOM
killer would."""

from __future__ import annotations

import argparse
import os
import signal
import time

import worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--slow-task", default="")
    parser.add_argument("--slow-factor", type=float, default=5.0)
    parser.add_argument("--grow-task", default="")
    parser.add_argument("--grow-mib", type=int, default=0)
    parser.add_argument("--grow-after", type=int, default=5)
    parser.add_argument("--kill-after-grow", type=float, default=0.0)
    args = parser.parse_args()
    ctx = worker.context()
    me = str(ctx.task)
    step_time = args.step_time * (args.slow_factor if me == args.slow_task else 1.0)
    held: list[bytes] = []
    grew_at = None
    end = time.monotonic() + args.duration
    step = 0
    while time.monotonic() < end:
        time.sleep(step_time)
        step += 1
        worker.report(step, loss=1.0 / step)
        if me == args.grow_task and step == args.grow_after:
            held.append(b"\x01" * (args.grow_mib * 1024 * 1024))
            grew_at = time.monotonic()
            print(f"{me} holds {args.grow_mib} MiB", flush=True)
        if grew_at is not None and args.kill_after_grow and \
                time.monotonic() - grew_at >= args.kill_after_grow:
            print(f"{me}: SIGKILL, as the OOM killer would", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    print(f"{me} done at step {step}", flush=True)


if __name__ == "__main__":
    main()
