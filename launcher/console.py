"""What the user sees: task output with a ``[worker:1]`` prefix (coloured on a TTY) and
tfcluster's own messages on stderr, prefixed ``tfcluster:``."""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")
_RESET = "\033[0m"


def _wants_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty()


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None,
                 colour: bool | None = None, show_task_output: bool = True) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.colour = _wants_colour(self.out) if colour is None else colour
        self.show_task_output = show_task_output
        self._lock = threading.Lock()
        self._width = 0

    def _prefix(self, task: str) -> str:
        self._width = max(self._width, len(task))
        label = f"[{task}]".ljust(self._width + 2)
        if not self.colour:
            return label
        index = int(task.rpartition(":")[2] or 0) + (0 if task.startswith("worker") else 5)
        return f"\033[{_COLOURS[index % len(_COLOURS)]}m{label}{_RESET}"

    def task_line(self, task: str, line: str) -> None:
        if not self.show_task_output:
            return
        with self._lock:
            self.out.write(f"{self._prefix(task)} {line}\n")
            self.out.flush()

    def say(self, text: str) -> None:
        self._write_err(text, "1")

    def warn(self, text: str) -> None:
        self._write_err(text, "33")

    def error(self, text: str) -> None:
        self._write_err(text, "31")

    def _write_err(self, text: str, code: str) -> None:
        colour = self.colour and _wants_colour(self.err)
        with self._lock:
            for line in text.splitlines() or [""]:
                label = f"\033[{code}mtfcluster:{_RESET}" if colour else "tfcluster:"
                self.err.write(f"{label} {line}\n")
            self.err.flush()
