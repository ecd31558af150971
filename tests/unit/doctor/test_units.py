"""How the doctor writes its figures: three significant digits, never an exponent, units that fit."""

from __future__ import annotations

import pytest

from launcher.doctor import units


@pytest.mark.parametrize(("value", "text"), [(1234.4, "1234"), (99.96, "100"), (99.94, "99.9"),
                                             (9.996, "10.0"), (1.2345, "1.23"), (0.0812, "0.0812"),
                                             (0.0, "0"), (0.999, "0.999")])
def test_number(value: float, text: str) -> None:
    assert units.number(value) == text


def test_rates_memory_and_offsets() -> None:
    assert units.bits(19.14) == "19.1 Mbit/s" and units.bits(3528.0) == "3.53 Gbit/s"
    assert units.bytes_rate(2.39) == "2.39 MB/s" and units.bytes_rate(2060.0) == "2.06 GB/s"
    assert units.memory(23 * 2**30) == "23.0 GiB" and units.memory(512 * 2**20) == "512 MiB"
    assert units.millis(0.031) == "0.031 ms"
    assert units.signed_millis(-0.04) == "+0.0 ms" and units.signed_millis(-3.14) == "-3.1 ms"
