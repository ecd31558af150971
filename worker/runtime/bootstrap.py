"""A cold start of a task's Python entrypoint: ``python -m worker.runtime.bootstrap -m MODULE
[ARGS...]`` or ``python -m worker.runtime.bootstrap SCRIPT [ARGS...]`` (a wire contract: the
planner writes these argvs; the agent runs them through :mod:`worker.wire.module_start`, so that a
``worker.py`` in the workdir cannot stand in for tfcluster's).

It runs the entrypoint the way ``python -m MODULE`` / ``python SCRIPT`` would, with the traceback
relay, ``SIGUSR1`` stack dumps and the ``ready`` report of :mod:`worker.runtime.task_entry`, which
a warm spare (:mod:`worker.runtime.spare`) shares, so that a task cannot tell the two starts apart.
A drill's ``crash`` signal becomes an exception (:mod:`worker.runtime.crash`).
"""

from __future__ import annotations

import sys

from worker.runtime.task_entry import USAGE, is_entry_argv, run


def main(argv: list[str]) -> None:
    if not is_entry_argv(argv):
        sys.exit(USAGE)
    run(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
