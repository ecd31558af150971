"""Starting one of tfcluster's own modules so that a ``worker`` of the user's cannot stand in for it.

``python -m worker.X`` puts the cwd first on ``sys.path``, and a task's cwd is the spec's workdir:
a ``worker.py`` (or a ``worker/`` package) of the user's there would be imported instead of
tfcluster's, and the task would die of it before tfcluster's code ran. So would the agent, which
runs in the workdir on a remote host, and locally where ``tfcluster`` was started (``tfcluster
local -n 2 -- python worker.py``). So every engine starts the agent, and the agent starts each
Python task (the planner's ``python -m worker.runtime.bootstrap ENTRY...``, as ``tfcluster plan``
shows it) and each warm spare, as :func:`module_argv` writes it, the ``-m`` command line with
``-c START_CODE`` before it::

    python -c START_CODE -m worker.agent
    python -c START_CODE -m worker.runtime.bootstrap ENTRY...

``START_CODE`` takes the cwd off ``sys.path`` before ``worker`` is imported, unless the cwd holds
tfcluster's own ``worker`` (a checkout as the workdir, which ``python -m`` would have found first
too: it has this very file), then :func:`run` puts the cwd back first and runs the module as
``python -m`` would have: same ``sys.path``, ``sys.argv`` and ``__main__``. So the task imports
tfcluster's ``worker`` (and a later ``import worker`` in the script gets that one, already
imported), and every other module of its workdir as before. Python 3.11's ``-P`` would do the
first half, but tfcluster supports 3.10 and must still find a checkout in the workdir.
"""

from __future__ import annotations

import os
import runpy
import sys

#: The host agent, as every engine starts it (:func:`agent_argv`).
AGENT_MODULE = "worker.agent"
#: A file that only tfcluster's ``worker`` package has (this module), relative to the cwd.
MARKER = "worker/wire/module_start.py"
#: Python (any 3.x) that takes the cwd off ``sys.path`` unless it holds tfcluster's ``worker``;
#: ``c`` says whether the cwd was first. Whatever else imports ``worker`` where a task or the
#: agent would (pre-flight's probe) should run it first, so as to find the same ``worker``.
CWD_RULE = ("import sys,os;c=sys.path[:1]==[''];"
            f"c and not os.path.isfile({MARKER!r}) and sys.path.pop(0)")
#: Run by ``python -c`` before ``-m MODULE ARGS...`` (see the module docstring).
START_CODE = f"{CWD_RULE};import worker.wire.module_start as s;s.run(c)"


def module_argv(python: str, module: str, *args: str) -> list[str]:
    """``python -m module args...``, started so that the cwd cannot shadow ``worker``."""
    return [python, "-c", START_CODE, "-m", module, *args]


def agent_argv(python: str) -> list[str]:
    """How every engine starts a host's agent: ``python -m worker.agent``, through
    :func:`module_argv`."""
    return module_argv(python, AGENT_MODULE)


def as_module_argv(argv: list[str]) -> list[str]:
    """``argv`` itself, or, when it is ``PYTHON -m worker.X ...``, the same started through
    :func:`module_argv`: the form in which the agent runs what the planner wrote."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2].startswith("worker."):
        return module_argv(argv[0], argv[2], *argv[3:])
    return argv


def run(cwd_first: bool) -> None:
    """Run ``-m MODULE ARGS...`` (``sys.argv[1:]``) as ``python -m`` would have: the cwd first on
    ``sys.path`` if ``cwd_first`` (the interpreter put it there: no ``-P`` / ``PYTHONSAFEPATH``),
    ``sys.argv[0]`` the module's file, and the module as ``__main__``."""
    if sys.argv[1:2] != ["-m"] or len(sys.argv) < 3:
        sys.exit("usage: python -c START_CODE -m MODULE [ARGS...] (worker.wire.module_start)")
    if sys.path[:1] == [""]:
        del sys.path[0]
    if cwd_first:
        sys.path.insert(0, os.getcwd())
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
