"""What the user sees: task output with a ``[worker:1]`` prefix (coloured on a TTY) and
tfcluster's own messages on stderr, prefixed ``tfcluster:``. On a terminal, :meth:`Console.live`
keeps a status table drawn under the output (rich).

What is shown of the task output is calmer than the task logs, which keep every line: unless
``verbose``, TensorFlow's known start-up noise is left out (:mod:`launcher.run.noise`); a line
is cut at :data:`MAX_LINE_CHARS` (the cut said); and with ``hold_s`` > 0 lines are held back that
long so that, once a task fails, what the others print while tfcluster stops them goes to their
logs only (:mod:`launcher.output.held`, :mod:`launcher.output.calm`): the console then says one
line per survivor (:meth:`Console.failure_report`). What tasks print when the coordination service's
leader has exited is shown only if the job fails (:mod:`launcher.output.job_end_lines`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TextIO, cast

from launcher.output.calm import CalmStop
from launcher.output.held import HeldLines
from launcher.output.job_end_lines import JobEndLines
from launcher.output.terminal import StreamWriter, WriterFile
from launcher.run.events import EventType
from launcher.run.noise import hidden_by_default

_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")
_RICH_COLOURS = ("cyan", "yellow", "magenta", "green", "blue", "bright_red", "bright_cyan",
                 "bright_yellow", "bright_magenta", "bright_green")
_LEVELS = {"say": ("1", "bold"), "warn": ("33", "yellow"), "error": ("31", "red")}
_RESET = "\033[0m"
#: A task line longer than this is cut on the console (the task log keeps it whole).
MAX_LINE_CHARS = 1000
#: How long output queued for the terminal may take to be written before a Ctrl-Z stops tfcluster.
STOP_FLUSH_S = 0.5
#: How long a line of tfcluster's waits for task output queued before it (stdout and stderr are
#: written by threads of their own: sent to one file, the order would otherwise be lost).
ORDER_FLUSH_S = 0.05
#: How long ``tfcluster run`` holds task output back (see :mod:`launcher.output.held`).
HOLD_S = 0.5


#: Control characters (C0 but tab, DEL, C1): shown escaped where a line must not drive the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
#: An escape sequence cut short at the end of a line (CSI or OSC without its final byte).
_CUT_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*|\][^\x07\x1b]*|[ -/]*)?$")


def printable(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` as one line that cannot drive the terminal: control characters (ESC, CR, a
    newline) shown escaped as Python writes them, and cut at ``limit`` characters (the cut said)."""
    text = _CONTROL.sub(lambda found: repr(found.group())[1:-1], text)
    return text if len(text) <= limit else \
        f"{text[:limit]}\u2026 [{len(text) - limit} more characters]"


def _cut(line: str) -> str:
    """A task line longer than :data:`MAX_LINE_CHARS`, cut there: an escape sequence the cut
    splits is left out, and the colours the task set are reset after it."""
    kept = _CUT_ESCAPE.sub("", line[:MAX_LINE_CHARS])
    reset = _RESET if "\x1b" in kept else ""
    return (f"{kept}{reset}\u2026 [{len(line) - MAX_LINE_CHARS} more characters in the task "
            "log]")


def _wants_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty()


def _colour_index(task: str) -> int:
    kind, _, index = task.rpartition(":")
    offset = 0 if kind == "worker" else 5
    return (int(index) if index.isdigit() else 0) + offset


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None,
                 colour: bool | None = None, show_task_output: bool = True,
                 *, verbose: bool = False, hold_s: float = 0.0,
                 at_job_start: Sequence[str] = ()) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._out = StreamWriter(self.out)
        self._err = StreamWriter(self.err)
        self.colour = _wants_colour(self.out) if colour is None else colour
        self.show_task_output = show_task_output
        self.verbose = verbose
        #: Task lines left out as TensorFlow noise (they are in the task logs).
        self.noise_lines = 0
        self._lock = threading.Lock()
        self._held = HeldLines(self._show_task_line, hold_s)
        self.calm = CalmStop(self._held, mute=not verbose)
        self._end_lines = JobEndLines()
        self._at_job_start = list(at_job_start)
        self._width = 0
        self._rich: Any = None  # a rich Console while a live status is shown

    def on_event(self, record: dict[str, Any]) -> None:
        """An event listener: says the ``at_job_start`` lines once the job started, mutes task
        output once a task failed (:mod:`launcher.output.calm`), and says how much TF noise was
        left out when the job ends (before its last line). The lines of a task that lost the
        coordination service's leader are dropped when the job succeeded, else shown."""
        kind = record.get("event")
        if kind == EventType.JOB_STARTED.value:
            for text in self._at_job_start:
                self.say(text)
            self._at_job_start.clear()
        elif kind == EventType.JOB_SUCCEEDED.value:
            self._drop_end_lines()
            self._say_noise()
        elif kind == EventType.JOB_FAILED.value:
            self._show_end_lines()
            self._say_noise()
        elif kind in (EventType.TASK_FAILED.value, EventType.ATTEMPT_STARTED.value):
            self._show_end_lines()  # before the calm console withdraws the survivors' lines
        self.calm.on_event(record)

    def _drop_end_lines(self) -> None:
        dropped = self._end_lines.drop()
        with self._lock:
            self.noise_lines += dropped

    def _show_end_lines(self) -> None:
        for task, line in self._end_lines.release():
            self._held.add(task, line)

    def _say_noise(self) -> None:
        with self._lock:
            count, self.noise_lines = self.noise_lines, 0
        if count:
            self.say(f"{count} line(s) of known TensorFlow noise not shown (they are in the task "
                     "logs; --verbose shows them)")

    @property
    def interactive(self) -> bool:
        """Output goes to a terminal: the live table is drawn. ``NO_COLOR`` does not change this:
        it takes colour away, nothing else (https://no-color.org; rich honours it in the table)."""
        return self.out.isatty()

    def _label(self, task: str) -> str:
        self._width = max(self._width, len(task))
        return f"[{task}]".ljust(self._width + 2)

    def task_line(self, task: str, line: str) -> None:
        if not self.show_task_output:
            return
        if not self.verbose and hidden_by_default(line):
            with self._lock:
                self.noise_lines += 1
            return
        for shown in [line] if self.verbose else self._end_lines.take(task, line):
            self._held.add(task, _cut(shown) if len(shown) > MAX_LINE_CHARS else shown)

    def failure_report(self, report: str) -> None:
        """An attempt's failure report (root cause first), then one line per task tfcluster
        stopped after the failure (how it ended, where its log is); task output is shown again."""
        self.error(report)
        for line in self.calm.survivor_lines():
            self.warn(line)

    def _show_task_line(self, task: str, line: str) -> None:
        with self._lock:
            label = self._label(task)
            if self._rich is not None:
                from rich.text import Text

                colour = _RICH_COLOURS[_colour_index(task) % len(_RICH_COLOURS)]
                self._rich.print(Text.assemble((label, colour), " ", line), soft_wrap=True)
                return
            if self.colour:
                code = _COLOURS[_colour_index(task) % len(_COLOURS)]
                label = f"\033[{code}m{label}{_RESET}"
            self._out.write(f"{label} {line}\n", droppable=True)

    def say(self, text: str) -> None:
        self._write_err(text, "say")

    def progress(self, text: str) -> None:
        """A snapshot of the tasks' progress, said without first showing the task lines held
        back: a snapshot needs no order with them, and a failure known a moment later must still
        be able to withdraw them (a survivor's reaction to a death it has already seen)."""
        self._write_err(text, "say", release=False)

    def warn(self, text: str) -> None:
        self._write_err(text, "warn")

    def error(self, text: str) -> None:
        self._write_err(text, "error")

    def _write_err(self, text: str, level: str, *, release: bool = True) -> None:
        code, style = _LEVELS[level]
        if release:
            self._held.release()  # task lines that came first are shown first
        with self._lock:
            if self._rich is not None:
                from rich.text import Text

                for line in text.splitlines() or [""]:
                    self._rich.print(Text.assemble(("tfcluster:", style), " ", line),
                                     soft_wrap=True)
                return
            self._out.flush(ORDER_FLUSH_S)
            colour = self.colour and _wants_colour(self.err)
            label = f"\033[{code}mtfcluster:{_RESET}" if colour else "tfcluster:"
            self._err.write("".join(f"{label} {line}\n" for line in text.splitlines() or [""]))

    def before_stop(self) -> None:
        """tfcluster is about to stop (Ctrl-Z): what is queued is shown (briefly waited for) and
        the live view gives the shell its cursor back."""
        if self._rich is not None:
            self._rich.show_cursor(True)
        self._out.flush(STOP_FLUSH_S)
        self._err.flush(STOP_FLUSH_S)

    def after_stop(self) -> None:
        """tfcluster runs again (``fg``): the live view hides the cursor again."""
        if self._rich is not None:
            self._rich.show_cursor(False)

    @property
    def dropped_lines(self) -> int:
        """Task output lines not shown because the terminal could not keep up."""
        return self._out.dropped

    def close(self) -> None:
        """Say how much TF noise was left out, write out what is still queued (bounded wait for
        a slow reader). Safe to repeat."""
        if self._end_lines.succeeded:
            self._drop_end_lines()
        else:
            self._show_end_lines()
        self._held.close()
        self._say_noise()
        self._out.close()
        self._err.close()

    @contextlib.contextmanager
    def live(self, render: Callable[[], Any]) -> Iterator[None]:
        """Keep ``render()`` (a rich renderable) drawn below everything printed meanwhile."""
        from rich.console import Console as RichConsole
        from rich.live import Live

        rich_console = RichConsole(file=cast(IO[str], WriterFile(self._out)),
                                   force_terminal=True)
        with Live(get_renderable=render, console=rich_console, refresh_per_second=4,
                  redirect_stdout=False, redirect_stderr=False):
            self._rich = rich_console
            try:
                yield
            finally:
                self._rich = None
