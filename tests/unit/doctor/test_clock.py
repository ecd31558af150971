"""Clock offsets from request/answer exchanges: NTP's arithmetic, the shortest round trip wins."""

from __future__ import annotations

import pytest

from launcher.doctor.clock import ClockOffset, ClockSample, clock_offset, spread


def test_offset_is_the_reading_minus_the_midpoint_give_or_take_half_the_round_trip() -> None:
    # sent at 100.000, answered at 100.010 by a clock that read 100.105: 100 ms ahead, +- 5 ms
    offset = clock_offset([ClockSample(100.000, 100.105, 100.010)])
    assert offset.offset_ms == pytest.approx(100.0)
    assert offset.uncertainty_ms == pytest.approx(5.0)


def test_the_sample_with_the_shortest_round_trip_is_used() -> None:
    slow = ClockSample(10.0, 10.300, 10.400)  # a 400 ms exchange says +100 ms
    fast = ClockSample(20.0, 19.9505, 20.001)  # a 1 ms exchange says -50 ms
    offset = clock_offset([slow, fast, slow])
    assert offset.offset_ms == pytest.approx(-50.0)
    assert offset.uncertainty_ms == pytest.approx(0.5)


def test_a_clock_behind_is_negative() -> None:
    assert clock_offset([ClockSample(50.0, 49.0, 50.0)]).offset_ms == pytest.approx(-1000.0)


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="no clock samples"):
        clock_offset([])


def test_spread_is_the_largest_minus_the_smallest_offset_with_both_uncertainties() -> None:
    offsets = [ClockOffset(3.0, 0.5), ClockOffset(-2.0, 0.25), ClockOffset(1.0, 4.0)]
    apart = spread(offsets)
    assert apart == ClockOffset(5.0, 0.75)
    assert spread(offsets[:1]) is None
