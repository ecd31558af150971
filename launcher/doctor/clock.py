"""How far a host's clock is from the coordinator's, from a few request/answer exchanges (NTP's
arithmetic): the host read its clock at some instant between the request leaving and the answer
arriving, so the offset is its reading minus the midpoint, give or take half the round trip. The
exchange with the shortest round trip bounds it best."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockSample:
    """One exchange: the coordinator's clock when the request left and when the answer came,
    and the host's clock in its answer (seconds since the epoch)."""

    sent: float
    remote: float
    received: float


@dataclass(frozen=True)
class ClockOffset:
    """The host's clock minus the coordinator's, within ``± uncertainty_ms``."""

    offset_ms: float
    uncertainty_ms: float


def clock_offset(samples: Sequence[ClockSample]) -> ClockOffset:
    """The offset given by the sample with the shortest round trip (ValueError if none)."""
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda s: s.received - s.sent)
    midpoint = (best.sent + best.received) / 2
    return ClockOffset((best.remote - midpoint) * 1000.0,
                       max(0.0, best.received - best.sent) * 1000.0 / 2)


def spread(offsets: Sequence[ClockOffset]) -> ClockOffset | None:
    """How far apart the hosts' clocks are: the largest offset minus the smallest, within the
    two uncertainties added; None for fewer than two hosts."""
    if len(offsets) < 2:
        return None
    high = max(offsets, key=lambda o: o.offset_ms)
    low = min(offsets, key=lambda o: o.offset_ms)
    return ClockOffset(high.offset_ms - low.offset_ms, high.uncertainty_ms + low.uncertainty_ms)
