"""A cold start of a task's Python entrypoint: ``python -m worker.bootstrap -m MODULE [ARGS...]`` or
``python -m worker.bootstrap SCRIPT [ARGS...]`` (a wire contract: the planner writes these argvs).

It runs the entrypoint the way ``python -m MODULE`` / ``python SCRIPT`` would, with the traceback
relay, ``SIGUSR1`` stack dumps and the ``ready`` report of :mod:`worker.task_entry`, which a warm
spare (:mod:`worker.spare`) shares, so that a task cannot tell the two starts apart. A drill's
``crash`` signal becomes an exception (:mod:`worker.crash`).
"""

from __future__ import annotations

import sys

from worker.task_entry import STACK_DUMP_SIGNAL, USAGE, enable_stack_dumps, is_entry_argv, run

__all__ = ["STACK_DUMP_SIGNAL", "enable_stack_dumps", "main"]


def main(argv: list[str]) -> None:
    if not is_entry_argv(argv):
        sys.exit(USAGE)
    run(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
