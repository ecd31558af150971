"""What the user sees: task output with a ``[worker:1]`` prefix (coloured on a TTY) and
tfcluster's own messages on stderr, prefixed ``tfcluster:``. On a terminal, :meth:`Console.live`
keeps a status table drawn under the output (rich)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, TextIO, cast

from launcher.output.terminal import StreamWriter, WriterFile

_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")
_RICH_COLOURS = ("cyan", "yellow", "magenta", "green", "blue", "bright_red", "bright_cyan",
                 "bright_yellow", "bright_magenta", "bright_green")
_LEVELS = {"say": ("1", "bold"), "warn": ("33", "yellow"), "error": ("31", "red")}
_RESET = "\033[0m"


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
                 colour: bool | None = None, show_task_output: bool = True) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._out = StreamWriter(self.out)
        self._err = StreamWriter(self.err)
        self.colour = _wants_colour(self.out) if colour is None else colour
        self.show_task_output = show_task_output
        self._lock = threading.Lock()
        self._width = 0
        self._rich: Any = None  # a rich Console while a live status is shown

    @property
    def interactive(self) -> bool:
        return self.colour and self.out.isatty()

    def _label(self, task: str) -> str:
        self._width = max(self._width, len(task))
        return f"[{task}]".ljust(self._width + 2)

    def task_line(self, task: str, line: str) -> None:
        if not self.show_task_output:
            return
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

    def warn(self, text: str) -> None:
        self._write_err(text, "warn")

    def error(self, text: str) -> None:
        self._write_err(text, "error")

    def _write_err(self, text: str, level: str) -> None:
        code, style = _LEVELS[level]
        with self._lock:
            if self._rich is not None:
                from rich.text import Text

                for line in text.splitlines() or [""]:
                    self._rich.print(Text.assemble(("tfcluster:", style), " ", line),
                                     soft_wrap=True)
                return
            colour = self.colour and _wants_colour(self.err)
            label = f"\033[{code}mtfcluster:{_RESET}" if colour else "tfcluster:"
            self._err.write("".join(f"{label} {line}\n" for line in text.splitlines() or [""]))

    @property
    def dropped_lines(self) -> int:
        """Task output lines not shown because the terminal could not keep up."""
        return self._out.dropped

    def close(self) -> None:
        """Write out what is still queued (bounded wait for a slow reader). Safe to repeat."""
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
