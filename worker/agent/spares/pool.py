"""Warm spares for the agent: one pre-started interpreter per task of its host, its heavy modules
imported, waiting for the task's next launch (:mod:`worker.runtime.spare`), so that a restart skips the
interpreter start and the imports.

The agent drives a :class:`SparePool` from its one thread and its selector:

1. :meth:`SparePool.fill` while an attempt runs: one spare per task (of ``python -m
   worker.runtime.bootstrap`` tasks), started with the task's pipes, interpreter, cwd and env, never
   blocking; each spare's channel is registered in the agent's selector with ``data ==``
   :data:`SELECTOR_DATA`, and :meth:`SparePool.on_readable` is called when it is readable;
2. at the next launch, per task, :meth:`SparePool.take`: a ready spare that fits the launch, or
   :class:`NoSpare` saying why not (none, died, failed its import, not ready yet, the launch's
   import-time env or interpreter differs: a spare that does not fit is killed); whether to wait
   for one still importing is :mod:`worker.agent.spares.readiness`';
3. :meth:`SparePool.launch` hands it the launch; the result is a task process like any other
   (:class:`~worker.agent.spares.process.LaunchedSpare`). :class:`SpareLaunchError` means start it cold;
4. every pid the agent reaps that is not a task goes to :meth:`SparePool.reaped`; the agent's
   teardown of an attempt spares :meth:`SparePool.pids`; :meth:`SparePool.close` kills the rest.

What a spare fixed as it started, its launch must agree with: the interpreter (``argv[0]``, and
``PATH`` among the import-time variables), the cwd (``sys.path[0]``, relative ``PYTHONPATH``
entries), the entrypoint's ``sys.path[0]`` and every import-time variable
(:mod:`worker.agent.spares.import_env`). The rest (TF_CONFIG, argv, other variables) is launched.
"""

from __future__ import annotations

import os
import select
import selectors
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from worker.agent.spares import import_env
from worker.agent.spares.process import LIVE, LaunchedSpare, Spare, SpareState, child_environ
from worker.runtime import task_entry
from worker.runtime.spare import ChannelError, ChannelKind, encode
from worker.wire import env
from worker.wire.module_start import as_module_argv, module_argv
from worker.wire.protocol import TaskLaunch

__all__ = ["SELECTOR_DATA", "LaunchedSpare", "NoSpare", "Spare", "SpareEvent", "SpareLaunchError",
           "SparePool", "SpareState"]

#: The ``data`` of every selector key the pool registers.
SELECTOR_DATA = "spare"
#: How long :meth:`SparePool.launch` waits for a running spare to take its launch (a stopped one
#: is given up at once: :meth:`Spare.stopped`).
LAUNCH_TIMEOUT_S = 5.0
#: A spare still importing at its launch is waited for when it has at most this share of its
#: expected import left, in CPU time (a cold start would do all of it again), else killed.
NEARLY_READY_SHARE = 0.5
#: ... for its expected rest plus this (it may share the CPU with other starts meanwhile).
READY_MARGIN_S = 0.3
#: How long :meth:`SparePool.close` waits for its killed spares to end.
CLOSE_TIMEOUT_S = 5.0
BOOTSTRAP = ("-m", "worker.runtime.bootstrap")


@dataclass(frozen=True)
class NoSpare:
    """No spare for ``task``: start it cold; ``reason`` says why (for the agent's log)."""

    task: str
    reason: str


@dataclass(frozen=True)
class SpareEvent:
    """Something happened to the spare of ``task`` (it became ready, failed, was discarded)."""

    task: str
    state: SpareState
    text: str
    pid: int | None = None
    rss_bytes: int | None = None


class SpareLaunchError(Exception):
    """The spare did not take its launch (it is killed): start the task cold."""


@dataclass(frozen=True)
class _Fit:
    """What a spare fixed as it started, which its launch must agree with."""

    python: str
    cwd: str
    path0: str
    import_env: dict[str, str]


def _fit(task: TaskLaunch) -> _Fit:
    cwd = os.path.abspath(task.cwd)
    environ = {**env.without_own(os.environ), **env.without_own(task.env)}
    return _Fit(python=task.argv[0], cwd=cwd, path0=task_entry.entry_path0(task.argv[3:], cwd),
                import_env=import_env.import_time(environ))


def unsuitable(task: TaskLaunch) -> str | None:
    """Why ``task`` can have no spare (None if it can): only a Python entrypoint started as
    ``PYTHON -m worker.runtime.bootstrap ENTRY...`` can."""
    if tuple(task.argv[1:3]) != BOOTSTRAP or not task_entry.is_entry_argv(task.argv[3:]):
        return "it is not started as `python -m worker.runtime.bootstrap ...`"
    return None


def _bad_module_name(name: str) -> bool:
    return not name or not all(part.isidentifier() for part in name.split("."))


class SparePool:
    """The warm spares of one agent, at most one per task name. Used from one thread only."""

    def __init__(self, selector: selectors.BaseSelector,
                 launch_timeout_s: float = LAUNCH_TIMEOUT_S) -> None:
        self._selector = selector
        self._launch_timeout_s = launch_timeout_s
        self._spares: dict[str, Spare] = {}  # by task: starting, ready or failed
        self._fits: dict[str, _Fit] = {}
        self._taken: dict[int, Spare] = {}  # by pid: taken, not yet launched
        self._dying: list[Spare] = []  # killed or dead, not yet reaped
        self._by_fd: dict[int, Spare] = {}
        self._why_none: dict[str, str] = {}  # tasks given no spare, and why
        self._import_cpu_s: float | None = None  # the CPU time the last spare's imports took
        #: Until a spare has said it: how long the tasks took to import and start training (at
        #: least the CPU time a spare's imports take), given by the agent when it fills the pool.
        self.import_hint_s: float | None = None

    @property
    def spares(self) -> Mapping[str, Spare]:
        """The spare of each task that has one (starting, ready or failed)."""
        return dict(self._spares)

    @property
    def expected_import_s(self) -> float | None:
        """The CPU time a spare's imports are expected to take (None: nothing says yet)."""
        return self._import_cpu_s or self.import_hint_s

    # --- starting spares ----------------------------------------------------------------------

    def fill(self, tasks: Iterable[TaskLaunch], preload: Sequence[str]) -> list[SpareEvent]:
        """Start a spare for each of ``tasks`` that has no live one fitting it, importing
        ``preload`` (module names, in order). Each task's ``env`` is its whole overlay, as the
        agent gives it to ``TaskProcess`` (``Launch.task_env``). Does not wait for any import."""
        self._collect()
        preload = tuple(preload)
        events: list[SpareEvent] = []
        bad = [name for name in preload if _bad_module_name(name)]
        for task in tasks:
            why = unsuitable(task) or (f"bad module names to preload: {bad}" if bad else None)
            current = self._spares.pop(task.task, None)
            fit = self._fits.pop(task.task, None)
            if current is not None:
                if why is None and current.state in LIVE and current.preload == preload \
                        and fit == _fit(task):
                    self._spares[task.task], self._fits[task.task] = current, fit
                    continue
                changed = current.state in LIVE
                self._discard(current, "replaced: the preloads or what it must fit changed")
                if changed:
                    events.append(SpareEvent(task.task, current.state,
                                             f"spare {current.pid} {current.why()}",
                                             pid=current.pid))
            if why is not None:
                if self._why_none.get(task.task) != why:
                    events.append(SpareEvent(task.task, SpareState.FAILED, f"no spare: {why}"))
                self._why_none[task.task] = why
                continue
            events.append(self._start(task, preload))
        return events

    def _start(self, task: TaskLaunch, preload: tuple[str, ...]) -> SpareEvent:
        fit = _fit(task)
        argv = module_argv(fit.python, "worker.runtime.spare", "--preload", ",".join(preload), "--",
                           *task.argv[3:])
        environ = {**env.without_own(os.environ), **env.without_own(task.env)}
        if (mark := task.env.get(env.PROCESS_MARK)) is not None:  # the spare is the job's too
            environ[env.PROCESS_MARK] = mark
        try:
            spare = Spare.start(task.task, argv, environ, fit.cwd, preload)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            why = f"cannot start a spare with {fit.python!r}: {exc}"
            self._why_none[task.task] = why
            return SpareEvent(task.task, SpareState.FAILED, f"no spare: {why}")
        self._why_none.pop(task.task, None)
        self._spares[task.task] = spare
        self._fits[task.task] = fit
        self._watch(spare)
        return SpareEvent(task.task, SpareState.STARTING,
                          f"spare {spare.pid} started, importing {', '.join(preload) or 'nothing'}",
                          pid=spare.pid)

    # --- what spares say ----------------------------------------------------------------------

    def on_readable(self, fd: int) -> list[SpareEvent]:
        """A spare's channel (a fd the pool registered) is readable: what came of it."""
        spare = self._by_fd.get(fd)
        if spare is None or not spare.read_channel():
            return []
        if spare.state is SpareState.READY:
            self._import_cpu_s = spare.import_cpu_s or self._import_cpu_s
            rss = f", {spare.rss_bytes / 2**20:.0f} MiB RSS" if spare.rss_bytes else ""
            return [SpareEvent(spare.task, spare.state,
                               f"spare {spare.pid} ready in {spare.import_s}s{rss}, imported "
                               f"{', '.join(spare.modules) or 'nothing'}",
                               pid=spare.pid, rss_bytes=spare.rss_bytes)]
        self._unwatch(spare)
        spare.close_channel()
        spare.try_reap()
        return [SpareEvent(spare.task, spare.state, f"spare {spare.pid} {spare.why()}",
                           pid=spare.pid)]

    # --- using spares -------------------------------------------------------------------------

    def take(self, task: TaskLaunch, wait: bool = True) -> Spare | NoSpare:
        """The ready spare of ``task`` if it fits the launch ``task`` (its ``env`` the whole
        overlay, as for :meth:`fill`), for :meth:`launch`; else :class:`NoSpare` saying why, and
        the spare, if any, is killed. Blocks only for a spare :meth:`nearly_ready` (``wait``)."""
        self._collect()
        spare = self._spares.pop(task.task, None)
        fit = self._fits.pop(task.task, None)
        if spare is None or fit is None:
            return NoSpare(task.task, self._why_none.get(task.task, "no spare was started for it"))
        if spare.channel_fd is not None:
            spare.read_channel()  # news it sent since the last turn of the loop
        if wait and spare.state is SpareState.STARTING and \
                (nearly := self.nearly_ready(spare)) is not None:
            spare.wait_ready(nearly)
        if spare.state is SpareState.READY:
            self._import_cpu_s = spare.import_cpu_s or self._import_cpu_s
        if spare.state is SpareState.READY and not spare.alive():
            spare.fail("died while it waited")
        elif spare.state is SpareState.READY and spare.stopped():  # it would never answer
            spare.fail("was stopped (SIGSTOP) while it waited")
        if spare.state is SpareState.FAILED:
            self._discard(spare, "failed")
            return NoSpare(task.task, f"its spare {spare.pid} {spare.why()}")
        if spare.state is SpareState.STARTING:
            waited = time.monotonic() - spare.started_at
            self._discard(spare, f"not ready after {waited:.1f}s")
            return NoSpare(task.task, f"its spare {spare.pid} was not ready yet (still importing "
                                      f"after {waited:.1f}s): discarded")
        mismatch = self._mismatch(fit, task)
        if mismatch is not None:
            self._discard(spare, mismatch)
            return NoSpare(task.task, f"its spare {spare.pid} was discarded: {mismatch}")
        self._unwatch(spare)
        spare.state = SpareState.TAKEN
        self._taken[spare.pid] = spare
        return spare

    def nearly_ready(self, spare: Spare) -> float | None:
        """How long to wait for ``spare``, still importing, when it is nearly done (at most
        :data:`NEARLY_READY_SHARE` of its expected import left, in CPU time: a spare filled while
        training kept the cores busy has had little of them, however long ago it started);
        None when it is not, or when nothing says how long its imports take."""
        expected = self.expected_import_s
        if expected is None or spare.state is not SpareState.STARTING:
            return None
        used = spare.cpu_s()
        left = expected - (time.monotonic() - spare.started_at if used is None else used)
        return max(left, 0.0) + READY_MARGIN_S if left <= expected * NEARLY_READY_SHARE else None

    def _mismatch(self, fit: _Fit, task: TaskLaunch) -> str | None:
        if unsuitable(task) is not None:
            return "the launch is not `python -m worker.runtime.bootstrap ...`"
        wanted = _fit(task)
        if wanted.python != fit.python:
            return f"the launch's interpreter is {wanted.python!r}, the spare's {fit.python!r}"
        if wanted.cwd != fit.cwd:
            return f"the launch's cwd is {wanted.cwd!r}, the spare's {fit.cwd!r}"
        if wanted.path0 != fit.path0:
            return f"the launch's sys.path[0] is {wanted.path0!r}, the spare's {fit.path0!r}"
        differ = import_env.differences(fit.import_env, wanted.import_env)
        if differ:
            return f"the launch's import-time env differs in {', '.join(differ)}"
        return None

    def launch(self, spare: Spare, task: TaskLaunch) -> LaunchedSpare:
        """Make the spare that :meth:`take` gave for ``task`` become it: its argv, whole env
        (built as ``TaskProcess.start`` builds it), cwd. Blocks until the spare has taken it, at
        most the launch timeout (it takes microseconds). SpareLaunchError (the spare is killed)
        if it did not: then start the task cold, which fails the way a bad launch fails."""
        if self._taken.pop(spare.pid, None) is not spare:
            raise SpareLaunchError(f"{task.task}: spare {spare.pid} was not taken from this pool")
        if spare.task != task.task:
            self._discard(spare, f"launched as {task.task}")
            raise SpareLaunchError(f"{task.task}: spare {spare.pid} was taken for {spare.task}")
        message = encode(ChannelKind.LAUNCH, argv=task.argv[3:], orig_argv=as_module_argv(list(task.argv)),
                         env=child_environ(task.env, spare.report_fd, spare.control_fd),
                         cwd=os.path.abspath(task.cwd))
        try:
            kind, fields = spare.launch(message, self._launch_timeout_s)
            if kind is ChannelKind.LAUNCHED:
                spare.start_task()
                return spare.hand_over()
            spare.fail(f"refused its launch: {fields.get('error')}" if kind is ChannelKind.REFUSED
                       else f"answered its launch with {kind.value!r}")
        except ChannelError as exc:
            spare.fail(str(exc))
        self._discard(spare, "failed")
        raise SpareLaunchError(f"{task.task}: spare {spare.pid} {spare.why()}")

    def give_back(self, spare: Spare) -> None:
        """A spare taken but not to be launched after all: it is killed."""
        if self._taken.pop(spare.pid, None) is spare:
            self._discard(spare, "given back")

    # --- processes ------------------------------------------------------------------------------

    def reaped(self, pid: int, status: int) -> bool:
        """The agent reaped ``pid`` (wait status ``status``) and it is none of its tasks: True if
        it was a spare (it must not be signalled or waited for again)."""
        for spare in self._unreaped():
            if spare.pid == pid:
                spare.mark_reaped(status)
                spare.fail("died before its launch")
                self._unwatch(spare)
                spare.close_channel()
                self._collect()
                return True
        return False

    def pids(self) -> set[int]:
        """Every spare process not yet reaped (the agent's teardown of an attempt leaves them)."""
        return {spare.pid for spare in self._unreaped()}

    def usage(self) -> dict[str, int]:
        """The resident memory of each task's spare now, in bytes."""
        return {task: rss for task, spare in self._spares.items()
                if (rss := spare.rss_now()) is not None}

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> list[int]:
        """Kill every spare not launched, wait up to ``timeout_s`` for each to end and reap it,
        and close all their fds. Only ever our own unreaped children are signalled (see
        :mod:`worker.agent.spares.process`). Returns the pids killed; safe to call more than once."""
        killed = sorted(self.pids())
        for spare in [*self._spares.values(), *self._taken.values()]:
            self._discard(spare, "the pool closed")
        self._spares.clear()
        self._fits.clear()
        self._taken.clear()
        deadline = time.monotonic() + timeout_s
        while self._dying:
            self._collect()
            left = deadline - time.monotonic()
            if not self._dying or left <= 0:
                break
            _wait_any(self._dying, left)
        return killed

    # --- bookkeeping ------------------------------------------------------------------------------

    def _unreaped(self) -> list[Spare]:
        every = [*self._spares.values(), *self._taken.values(), *self._dying]
        return [spare for spare in every if not spare.reaped]

    def _discard(self, spare: Spare, reason: str) -> None:
        """Kill a spare that is not to be used; it is reaped now or later (:meth:`_collect`)."""
        if spare.state in LIVE:
            spare.state = SpareState.DISCARDED
            spare.reason = reason
        self._unwatch(spare)
        spare.kill()  # first: a spare never takes a closed channel for anything
        spare.close_channel()
        spare.close_pipes()
        if not spare.try_reap():
            self._dying.append(spare)

    def _collect(self) -> None:
        """Reap the killed spares that have ended."""
        self._dying = [spare for spare in self._dying if not spare.try_reap()]

    def _watch(self, spare: Spare) -> None:
        fd = spare.channel_fd
        if fd is not None:
            self._by_fd[fd] = spare
            self._selector.register(fd, selectors.EVENT_READ, SELECTOR_DATA)

    def _unwatch(self, spare: Spare) -> None:
        for fd, held in list(self._by_fd.items()):
            if held is spare:
                del self._by_fd[fd]
                self._selector.unregister(fd)


def _wait_any(spares: list[Spare], timeout_s: float) -> None:
    """Wait until one of ``spares`` may have ended, at most ``timeout_s``."""
    pidfds = [spare.pidfd for spare in spares if spare.pidfd is not None]
    if len(pidfds) < len(spares):  # no pidfds here: look again soon
        timeout_s = min(timeout_s, 0.01)
    poller = select.poll()
    for pidfd in pidfds:
        poller.register(pidfd, select.POLLIN)
    poller.poll(timeout_s * 1000)
