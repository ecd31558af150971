"""Waiting for something a test can see, with a deadline: never a bare ``sleep`` standing in for
an event. The one polling loop of the test suite."""

from __future__ import annotations

import time
from collections.abc import Callable

#: How often a condition is looked at: often enough for detection-time figures, cheap enough to
#: run beside a job on 2 cores.
POLL_S = 0.02


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               poll_s: float = POLL_S) -> None:
    """Return once ``condition()`` holds; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(poll_s)
