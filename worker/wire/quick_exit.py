"""Ending a process the way ``sys.exit`` does, less the interpreter's teardown.

At exit CPython runs the ``atexit`` functions, joins the threads that are not daemons, flushes the
standard streams, and then tears down every module it imported and collects their objects: with
tfcluster's job machinery imported that last part takes 10-20 ms, spent after the job is over, at
the end of every run, by the coordinator and by each agent it waits for. :func:`exit_now` does
everything before it (the ``atexit`` functions, the flush) and then ``os._exit``; while a thread
that is not a daemon still runs it is plain ``sys.exit``, which waits for that thread.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` (as ``sys.exit(code)`` would for an int): ``atexit`` functions run and
    standard streams flushed, modules not torn down."""
    main = threading.main_thread()
    if threading.current_thread() is not main or \
            any(not t.daemon for t in threading.enumerate() if t is not main):
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter does first at exit (coverage, logging...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
            stream.flush()
    os._exit(code & 0xFF)
