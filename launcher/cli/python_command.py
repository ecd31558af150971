"""``tfcluster local -- python3 main.py``: a Python command runs in tfcluster's own interpreter.

tfcluster is usually installed in a virtualenv that is not on ``PATH``; ``python3`` would then be
the system's, without TensorFlow, and every task would die of ``No module named 'tensorflow'``.
Like ``torchrun``, ``tfcluster local`` runs a command whose first word is a bare ``python``,
``python3`` or ``pythonX.Y`` with the interpreter tfcluster runs in (as a script or module
entrypoint when it can, so warm spares and traceback reports work as for ``-m`` and ``.py``).
To run another interpreter, give its path (``/usr/bin/python3``, ``$(which python3)``): a path is
run as it is given.

A spec's ``entrypoint.command`` is run as written (it is the spec's to say); when it starts with a
bare Python name that is not tfcluster's interpreter on this machine, ``tfcluster run`` says so in
one line (:func:`path_python_note`), so that a ``No module named 'tensorflow'`` explains itself.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.spec.model import ClusterSpec

_BARE_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")


def is_bare_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11``: a name looked up on PATH, not a path."""
    return _BARE_PYTHON.fullmatch(word) is not None


def python_entrypoint(command: list[str]) -> dict[str, Any] | None:
    """The spec entrypoint that runs ``command`` with tfcluster's interpreter, or None when
    ``command`` does not start with a bare Python name (it then runs as given)."""
    if not command or not is_bare_python(command[0]):
        return None
    rest = command[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return {"module": rest[1], "args": rest[2:]}
    if rest and not rest[0].startswith("-"):
        return {"script": rest[0], "args": rest[1:]}
    return {"command": [sys.executable, *rest]}  # interpreter options: keep them as given


def interpreter_note(words: list[str]) -> str | None:
    """The one line that says which interpreter runs the command ``words`` (after an optional
    ``--``), None when it runs as given."""
    command = words[1:] if words[:1] == ["--"] else words
    if python_entrypoint(command) is None:
        return None
    return (f"running {command[0]!r} as tfcluster's own interpreter {sys.executable} (as "
            f"torchrun does); give a path, e.g. /usr/bin/{command[0]}, to run another one")


def path_python_note(spec: ClusterSpec) -> str | None:
    """One line when ``spec``'s command starts with a bare Python name that, for the tasks on this
    machine, is not tfcluster's interpreter (None otherwise, or when no task runs here)."""
    command = spec.entrypoint.command
    if not command or not is_bare_python(command[0]):
        return None
    if not any(slot.host == "localhost" for slot in spec.task_slots()):
        return None
    found = shutil.which(command[0])
    if found is not None and os.path.realpath(found) == os.path.realpath(sys.executable):
        return None
    where = "not found on PATH" if found is None else f"{found} on PATH"
    return (f"local tasks run {command[0]!r} as the spec's command says ({where}), not "
            f"tfcluster's interpreter {sys.executable}; use entrypoint.script or module to run "
            "them with tfcluster's")
