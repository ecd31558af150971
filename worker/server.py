"""tfcluster's built-in TensorFlow server: ``python -m worker.server``, the whole program of a
``worker`` or ``ps`` task of a ParameterServerStrategy job.

Under ParameterServerStrategy only the chief (the *coordinator*) runs the user's training script;
every worker and parameter server is a plain ``tf.distribute.Server`` that the coordinator sends
functions and variables to. This module is that server: it reads TF_CONFIG, starts the server at
its task's address, prints one line (``worker:1 serving on HOST:PORT (TensorFlow 2.21.0)``) to
stderr and serves until ``SIGTERM`` or ``SIGINT``, then says so in one line and exits 0.

TF_CONFIG missing, unreadable, or naming a task that is neither a worker nor a parameter server:
one line on stderr, exit 2 (:data:`BAD_CONFIG_EXIT_CODE`). A server that cannot start (its port
is taken): one line, exit 1.

It runs as any Python task does (``python -m worker.runtime.bootstrap -m worker.server``, or
handed to a warm spare that has already imported TensorFlow), through
:func:`worker.runtime.task_entry.run`, which has already sent the ``ready`` report. TensorFlow is
imported only inside :func:`serve`.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from worker.wire import env
from worker.wire.tfconfig import PS, WORKER, TaskId, TFConfig, TFConfigError

#: The task types this module serves.
SERVED_TYPES = (WORKER, PS)
#: Exit code when TF_CONFIG does not name a task this module can serve.
BAD_CONFIG_EXIT_CODE = 2
#: The signals that stop the server (tfcluster's teardown sends SIGTERM; SIGINT is Ctrl-C).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class NotServable(Exception):
    """TF_CONFIG is missing or does not name a worker or parameter server task."""


def served_task(environ: Mapping[str, str]) -> TFConfig:
    """The TF_CONFIG of ``environ``, checked to name a worker or ``ps`` task of its cluster;
    :class:`NotServable` says why not."""
    raw = environ.get(env.TF_CONFIG)
    if not raw:
        raise NotServable(f"{env.TF_CONFIG} is not set: nothing to serve")
    try:
        config = TFConfig.from_json(raw)
    except TFConfigError as exc:
        raise NotServable(str(exc)) from exc
    if config.task.type not in SERVED_TYPES:
        raise NotServable(f"{env.TF_CONFIG} names task {config.task}: only "
                          f"{' and '.join(SERVED_TYPES)} tasks run a server (the chief runs "
                          "the training script)")
    return config


class StopSignals:
    """SIGTERM and SIGINT, caught from the moment this is made and waited for by the main thread.

    ``server.join()`` blocks in C++, where Python cannot run a signal handler, and the kernel may
    deliver the signal to any of TensorFlow's threads, where it would not interrupt a wait in the
    main thread. So the handlers do nothing themselves: Python's C-level handler writes every
    handled signal's number to a wakeup pipe, whichever thread it ran on, and :meth:`wait` reads
    that pipe. A signal that came before :meth:`wait` (during TensorFlow's import) is in the pipe
    already. A drill's crash signal (whose own handler raises) wakes the wait too, and raises.
    """

    def __init__(self) -> None:
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # signal.set_wakeup_fd requires it
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda _signum, _frame: None)

    def wait(self) -> signal.Signals:
        """Block until SIGTERM or SIGINT has arrived (since this was made); return which."""
        while True:
            stop = self._read(None)
            if stop is not None:
                return stop

    def received(self) -> signal.Signals | None:
        """SIGTERM or SIGINT if one has arrived already, else None (without waiting)."""
        return self._read(0.0)

    def _read(self, timeout: float | None) -> signal.Signals | None:
        """Wait up to ``timeout`` seconds (None: forever) for signals in the pipe, read them, and
        return the first stop signal among them; None if there was none."""
        if not select.select([self._read_fd], [], [], timeout)[0]:
            return None
        for number in os.read(self._read_fd, 64):
            if number in STOP_SIGNALS:
                return signal.Signals(number)
        return None


def serve(config: TFConfig, stop: StopSignals) -> int:
    """Start this task's server, say where it serves, and serve until ``stop``; the exit code."""
    # Fail an RPC to a dead peer at once instead of waiting for it ("use_caller" is also the
    # default of the TensorFlow versions we know; set for the others). TensorFlow's gRPC layer
    # reads it at every RPC (RPCState in grpc_state.h), not at import or channel creation: in a
    # warm spare, which has imported TensorFlow already, setting it here still counts.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    import tensorflow as tf

    task: TaskId = config.task
    address = config.address(task)
    stopped = stop.received()  # during TensorFlow's import: do not start the server at all
    if stopped is not None:
        print(f"{task}: stopping ({stopped.name})", file=sys.stderr, flush=True)
        return 0
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=task.type,
                                      task_index=task.index, protocol="grpc", start=True)
    except (tf.errors.OpError, ValueError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"{task}: cannot serve on {address}: {first_line}", file=sys.stderr, flush=True)
        return 1
    print(f"{task} serving on {address} (TensorFlow {tf.__version__})", file=sys.stderr,
          flush=True)
    print(f"{task}: stopping ({stop.wait().name})", file=sys.stderr, flush=True)
    del server  # held until here: gRPC servers cannot be stopped, but say what is meant
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m worker.server``: serve the task TF_CONFIG names; the exit code."""
    argparse.ArgumentParser(prog="python -m worker.server",
                            description="Serve this ParameterServerStrategy worker or ps task "
                                        "(from TF_CONFIG) until SIGTERM.").parse_args(argv)
    try:
        config = served_task(os.environ)
    except NotServable as exc:
        print(f"worker.server: {exc}", file=sys.stderr, flush=True)
        return BAD_CONFIG_EXIT_CODE
    stop = StopSignals()  # before TensorFlow's import: a SIGTERM during it still ends us cleanly
    return serve(config, stop)


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """``python -m worker.server`` whole: :func:`main`, then exit at once with its code.

    Not ``sys.exit``: the C++ server cannot be stopped, and interpreter shutdown around its live
    threads takes about a second (or blocks); nothing is left to clean up in Python."""
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
