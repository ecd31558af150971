"""A bound on a whole operation made of steps that each have their own timeout."""

from __future__ import annotations

import time

#: How long one SSH connection (and one host's pre-flight) may take by default, seconds.
DEFAULT_CONNECT_TIMEOUT_S = 10.0


class Deadline:
    """An optional bound on a whole operation; every step takes ``min(its own, what is left)``."""

    def __init__(self, seconds: float | None = None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self, cap: float) -> float:
        if self.at is None:
            return cap
        return max(0.0, min(cap, self.at - time.monotonic()))
