"""Graceful preemption for MultiWorkerMirroredStrategy custom training loops.

A preemption notice is a ``SIGTERM`` to *any one* task (from ``tfcluster signal``, a cluster manager,
or a test). The task that gets it cannot simply save and leave: the other tasks are in lock-step
with it and would hang in their next collective. So every task asks, after every step, "does the
job stop after this step?", and they all get the same answer at the same step: the step they
just trained is the one they save, nothing is lost. The ``SIGTERM`` handler only sets a flag.

Under tfcluster the coordinator picks the step (:mod:`launcher.job.stop_step`): the task that got
the notice reports the step it has just finished and holds there; the coordinator sends the next
step to every other task through its agent (:mod:`worker.stop_channel`, read by a thread), and to
the holding task once all the others have answered. The tasks of a lock-step job are never more
than one step apart and none can finish a step the holding task has not begun, so every task
knows the step before it could train past it. Per step, :meth:`PreemptionWatcher.should_stop`
then reads two local flags: no collective, no system call (the notice's round trip, a few
milliseconds, is paid once).

Outside tfcluster (no control pipe: another launcher, TF_CONFIG set by hand) the tasks agree by
themselves: :meth:`PreemptionWatcher.should_stop` all-reduces the flag (SUM of 0/1 over every
replica) in a small ``tf.function``, a scalar collective next to the train step that every task
calls at the same steps, as MWMS requires. It costs about 2-2.7 ms with two CPU workers on one
2-core host (TF 2.21), ~20% of a 10-12 ms digits step if it ran after every step. So those tasks
check every :data:`CHECK_INTERVAL_S` of training, not every step: each check also agrees on the
step of the next one, from the tasks' mean step time (the all-reduce carries each task's proposal
with the flag; their mean is the same on every task). ``every=N`` fixes that interval at N steps
(``every=1``: after every step); a lone task reads its own flag after every step.

A loop that stalls after the notice must not outlive it. That is the common case, not a corner
one: when a task dies, tfcluster TERMs the others, and they are blocked in a collective that waits
for the dead peer (TF aborts it when the connection resets, or only when the coordination service
has missed ~10 s of heartbeats); the Python handler, which runs only between bytecodes of the main
thread, never gets to run. (Nor does TERM kill a plain MWMS task: TF 2.21's coordination service
installs a C-level SIGTERM handler that only records the notice; installing ours replaces it.)
So the signal's arrival is also watched from a thread through :func:`signal.set_wakeup_fd`; if
the loop makes no call to :meth:`~PreemptionWatcher.should_stop` within an allowance (counted
from the notice or from the last call, whichever is later), the thread dumps every thread's stack
to stderr and the task dies by ``SIGTERM``'s default action (not with exit code 143, which would
claim a checkpoint that was never saved). The allowance adapts to the loop: four times the
longest of the last 64 intervals between calls, at least 2 s (30 s before the loop has a
measured interval); ``timeout_s`` fixes it instead. A task holding for the coordinator's step
waits up to :data:`STOP_STEP_TIMEOUT_S` for it, then dies the same way.

TensorFlow is imported lazily: importing this module never loads TF.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
from collections import deque
from types import FrameType
from typing import Any

from worker.stop_channel import StopChannel, stop_channel

__all__ = ["PreemptionWatcher"]

#: The stall allowance after a notice: STALL_FACTOR times the longest recent step interval ...
STALL_FACTOR = 4
#: ... over this many intervals ...
STALL_WINDOW = 64
#: ... but at least this long ...
MIN_ALLOWANCE_S = 2.0
#: ... and this long while no interval has been measured yet.
FIRST_ALLOWANCE_S = 30.0

#: By default the tasks agree on a notice about this often (in seconds of training) ...
CHECK_INTERVAL_S = 0.25
#: ... and at least every this many steps.
MAX_CHECK_STEPS = 1000
#: Where TensorFlow's coordination service records a SIGTERM its own handler caught
#: (tf.distribute.experimental.PreemptionWatcher reads it too).
TF_NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
#: TensorFlow's handler passes a notice on to the coordination service up to 1 s after it caught
#: it (its listener thread looks once a second): the key is read again every TF_RECHECK_S of
#: training until TF_NOTICE_LAG_S after install (each look costs up to 10 ms when there is none).
TF_NOTICE_LAG_S = 1.2
TF_RECHECK_S = 0.3
#: How long a task that got the notice holds for the coordinator's stop step.
STOP_STEP_TIMEOUT_S = 30.0

_Handler = Any  # what signal.signal returns: a callable, SIG_DFL / SIG_IGN, or None

#: A notice that arrived before any watcher was installed (:func:`catch_early`).
_early = threading.Event()


def catch_early(signum: signal.Signals = signal.SIGTERM) -> None:
    """Keep a notice that arrives before the training loop's watcher exists (during imports and
    set-up, when nothing has been trained yet): the watcher, once installed, stops the job at its
    first step as if the notice had come then. Called when ``worker.checkpointing`` is imported;
    does nothing outside the main thread or when a handler other than the default is in place."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signum) is signal.SIG_DFL:
        signal.signal(signum, _on_early_signal)


def _tf_caught_a_notice() -> bool:
    """Whether TensorFlow's own SIGTERM handler caught a notice before ours took over: the
    coordination service installs it with the strategy (replacing :func:`catch_early`'s) and
    records the task that got one under :data:`TF_NOTICE_KEY`, which every task can read."""
    if "tensorflow" not in sys.modules:  # no strategy, no handler of TF's: nothing to import
        return False
    try:
        from tensorflow.python.eager import context

        return bool(context.context().get_config_key_value(TF_NOTICE_KEY, 10))
    except Exception:  # no coordination service, or no key within 10 ms: no notice
        return False


def _on_early_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    _early.set()
    os.write(2, f"[tfcluster] got {signal.Signals(signum).name} before training began: every task "
                "will save a checkpoint at the first agreed step and exit\n".encode())


class PreemptionWatcher:
    """Turns a ``SIGTERM`` to any task of an MWMS job into the same stop step on every task.

    ``strategy`` is the job's ``MultiWorkerMirroredStrategy`` (None: a lone task, no collective).
    :meth:`install` must run in the main thread; :meth:`should_stop` must be called by every task
    after every step, with the same steps (it runs a collective at the steps the tasks agreed on;
    ``every``: on every ``every``-th step instead). ``timeout_s``: how long the loop may stall
    after a notice (None: adapt to the step time); ``watchdog=False``: never give up (a stalled
    task then waits for SIGKILL).
    """

    def __init__(self, strategy: Any | None, *, every: int | None = None,
                 timeout_s: float | None = None, watchdog: bool = True,
                 signum: signal.Signals = signal.SIGTERM) -> None:
        if every is not None and every < 1:
            raise ValueError(f"every must be >= 1, not {every}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {timeout_s}")
        self.strategy = strategy
        self.every = every
        self.timeout_s = timeout_s
        self.watchdog = watchdog
        self.signum = signum
        self._requested = threading.Event()  # this task got the signal
        self._announced = False
        self._agreed = threading.Event()  # every task agreed to stop: no more watchdog
        self._last_call = time.monotonic()  # the loop's last call of should_stop
        self._calls = 0
        self._intervals: deque[float] = deque(maxlen=STALL_WINDOW)
        #: Read by the watchdog thread; only the main thread assigns it.
        self.allowance_s = FIRST_ALLOWANCE_S if timeout_s is None else timeout_s
        self._channel: StopChannel | None = None  # the coordinator's stop step (under tfcluster)
        self._told = False  # the coordinator knows of this task's notice
        self._tf_recheck_at: float | None = None  # when to look for TF's notice once more
        self._tf_recheck_until = 0.0
        self._agree_fn: Any = None
        self._next_check: int | None = None  # the step of the next agreed check (None: the first)
        self._installed = False
        self._previous_handler: _Handler = None
        self._previous_wakeup_fd = -1
        self._wake_w: int | None = None
        self._thread: threading.Thread | None = None

    # -- the signal ------------------------------------------------------------------------------

    @property
    def requested(self) -> bool:
        """Whether this task got a preemption notice (other tasks may have got one instead)."""
        return self._requested.is_set()

    def install(self) -> None:
        """Catch the notice from now on (main thread only; idempotent)."""
        if self._installed:
            return
        if self.strategy is not None and self._channel is None:
            self._channel = stop_channel()
        self._previous_handler = signal.signal(self.signum, self._on_signal)
        self._installed = True
        early = _early.is_set() or self._tf_notice()
        if early:  # before training began: stop at the first agreed step
            self._requested.set()
            self._announced = True  # said already
        elif self.strategy is not None:
            self._tf_recheck_until = time.monotonic() + TF_NOTICE_LAG_S
            self._tf_recheck_at = time.monotonic() + TF_RECHECK_S
        if not self.watchdog:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C-level handler must never block on it
        self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._wake_w = write_fd
        self._thread = threading.Thread(target=self._watch, args=(read_fd,),
                                        name="preemption-watchdog", daemon=True)
        self._thread.start()
        if early:  # the watchdog counts from now
            os.write(write_fd, bytes([self.signum]))

    def _tf_notice(self) -> bool:
        """Whether TensorFlow's handler caught a notice (before :meth:`install` replaced it)."""
        if self.strategy is None or not _tf_caught_a_notice():
            return False
        os.write(2, b"[tfcluster] a preemption notice came before training began (caught by "
                    b"TensorFlow's handler): every task will save a checkpoint at the first "
                    b"agreed step and exit\n")
        return True

    def uninstall(self) -> None:
        """Restore the previous Python-level handler (main thread only; idempotent). A C-level
        handler that was replaced, such as TF's, is not restored: Python never knew it."""
        if not self._installed:
            return
        signal.signal(self.signum, self._previous_handler)
        self._installed = False
        if self._wake_w is not None:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
            self._agreed.set()  # wakes a watchdog that is counting down
            os.close(self._wake_w)  # EOF ends the watchdog thread
            self._wake_w = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self._requested.set()  # the watchdog thread may have been first
        if not self._announced:
            self._announced = True
            # os.write, not print: the main thread may be inside a write to sys.stderr right now
            os.write(2, f"[tfcluster] got {signal.Signals(signum).name}: every task will save a "
                        "checkpoint at the next agreed step and exit\n".encode())

    # -- the agreement ---------------------------------------------------------------------------

    def should_stop(self, step: int) -> bool:
        """Whether every task stops after ``step``: True on every task at once, or on none.

        A collective on every ``every``-th step: every task must call it after the same steps.
        """
        now = time.monotonic()
        self._calls += 1
        if self._calls > 2:  # the interval after the first call includes tracing: not typical
            self._intervals.append(now - self._last_call)
            if self.timeout_s is None:
                self.allowance_s = max(MIN_ALLOWANCE_S, STALL_FACTOR * max(self._intervals))
        self._last_call = now
        if self._tf_recheck_at is not None and now >= self._tf_recheck_at:
            found = self._tf_notice()
            if found:
                self._requested.set()
            again = time.monotonic() + TF_RECHECK_S
            self._tf_recheck_at = None if found or now > self._tf_recheck_until else again
        local = self._requested.is_set()
        if self.strategy is None:  # a lone task: no collective, its own flag (at once by default)
            agreed = local and (self.every is None or not step % self.every)
        elif self._channel is not None:  # under tfcluster: the coordinator's step
            stop = self._channel.step
            if stop is None and local:
                stop = self._hold(self._channel, step)
            agreed = stop is not None and step >= stop
        elif self.every is not None:
            agreed = not step % self.every and self._any_task(local, self.every)[0]
        elif self._next_check is not None and step < self._next_check:
            agreed = False
        else:
            agreed, interval = self._any_task(local, self._proposal())
            self._next_check = step + interval
        if agreed:
            self._agreed.set()
        return agreed

    def _hold(self, channel: StopChannel, step: int) -> int:
        """Tell the coordinator of this task's notice after ``step`` and wait for its stop step
        (the watchdog waits too: this is no stall of the loop's); give up after
        :data:`STOP_STEP_TIMEOUT_S` without one."""
        if not self._told:
            self._told = True
            channel.notice(step)
        deadline = time.monotonic() + STOP_STEP_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            stop = channel.wait(min(left, MIN_ALLOWANCE_S / 2))
            self._last_call = time.monotonic()
            if stop is not None:
                return stop
        self.allowance_s = STOP_STEP_TIMEOUT_S
        self._give_up("no stop step from tfcluster's coordinator")
        raise AssertionError("unreachable")  # _give_up ends the process

    def _proposal(self) -> int:
        """How many steps this task proposes until the next check: about CHECK_INTERVAL_S."""
        if not self._intervals:
            return 1
        step_s = sum(self._intervals) / len(self._intervals)
        return max(1, min(MAX_CHECK_STEPS, int(CHECK_INTERVAL_S / max(step_s, 1e-6))))

    def _any_task(self, local: bool, proposal: int) -> tuple[bool, int]:
        """One all-reduce: whether any task got a notice, and the tasks' mean ``proposal``."""
        import tensorflow as tf

        strategy: Any = self.strategy
        if self._agree_fn is None:

            def agree(values: tf.Tensor) -> tf.Tensor:
                per_replica = strategy.run(tf.identity, args=(values,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._agree_fn = tf.function(agree)
        flags, proposals = (int(v) for v in self._agree_fn(
            tf.constant([int(local), proposal], dtype=tf.int64)).numpy())
        return flags > 0, max(1, proposals // max(1, int(strategy.num_replicas_in_sync)))

    # -- the watchdog ----------------------------------------------------------------------------

    def _watch(self, read_fd: int) -> None:
        """Learn of the signal at once (even while the main thread is stuck in TF), then give the
        loop :attr:`allowance_s` between calls to :meth:`should_stop` until the tasks agree.

        The read end stays open (and drained) until :meth:`uninstall` closes the write end:
        CPython writes *every* signal with a Python handler (a second SIGTERM from a teardown,
        SIGINT) to the wakeup fd, and a write to a pipe whose reader is gone fails with EPIPE,
        which CPython reports as ``Exception ignored when trying to write to the signal wakeup
        fd: BrokenPipeError`` on the task's stderr."""
        with contextlib.closing(os.fdopen(read_fd, "rb", buffering=0)) as wake:
            while True:
                data = wake.read(64)
                if not data:
                    return  # uninstalled
                if self.signum in data:
                    break
            self._count_down()
            while wake.read(64):  # until uninstalled (EOF)
                pass

    def _count_down(self) -> None:
        self._requested.set()
        noticed = time.monotonic()
        while not self._agreed.is_set():
            left = max(noticed, self._last_call) + self.allowance_s - time.monotonic()
            if left <= 0:
                self._give_up("no graceful stop")
                return
            self._agreed.wait(left)

    def _give_up(self, what: str) -> None:
        print(f"[tfcluster] {what} within {self.allowance_s:.3g}s of "
              f"{self.signum.name} (is a peer gone, or does the loop not call should_stop / "
              "TrainingCheckpoint.preempted?); terminating without a checkpoint. Stacks:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        _die_by(self.signum)


def _die_by(signum: signal.Signals) -> None:
    """End the process by ``signum`` with its default action, from any thread.

    ``signal.signal`` only works in the main thread, which is stuck: reset the disposition in C.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal.restype = ctypes.c_void_p
        libc.signal(int(signum), None)  # SIG_DFL is 0
        os.kill(os.getpid(), signum)
        time.sleep(5)  # delivery is asynchronous
    except (OSError, AttributeError):
        pass
    os.kill(os.getpid(), signal.SIGKILL)
