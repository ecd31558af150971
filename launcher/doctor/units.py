"""How the doctor writes its figures: rates in decimal units (bits per second for links, as NICs are
sold, and bytes per second beside them), memory in binary ones (as ``free -h``), three significant
digits and never an exponent."""

from __future__ import annotations


def number(value: float) -> str:
    """``1234``, ``123``, ``12.3``, ``1.23``, ``0.0812`` (three significant digits, as rounded:
    99.96 is ``100``, not ``100.0``)."""
    for decimals, lowest in ((0, 99.95), (1, 9.995), (2, 0.9995)):
        if value >= lowest:
            return f"{value:.{decimals}f}"
    return f"{value:.3g}" if value >= 1e-4 else "0"


def bits(mbit_s: float) -> str:
    """``19.4 Mbit/s``, ``3.12 Gbit/s``."""
    if mbit_s >= 1000:
        return f"{number(mbit_s / 1000)} Gbit/s"
    return f"{number(mbit_s)} Mbit/s"


def bytes_rate(mb_s: float) -> str:
    """``2.43 MB/s``, ``1.20 GB/s``."""
    if mb_s >= 1000:
        return f"{number(mb_s / 1000)} GB/s"
    return f"{number(mb_s)} MB/s"


def millis(ms: float) -> str:
    """``0.081 ms``, ``12.3 ms``."""
    return f"{number(ms)} ms"


def signed_millis(ms: float) -> str:
    """A clock offset: ``+3.1 ms``, ``-0.4 ms``, ``+0.0 ms`` (never ``-0.0``)."""
    return f"{round(ms, 1) or 0.0:+.1f} ms"


def memory(size: int) -> str:
    """``12.3 GiB``, ``512 MiB``."""
    gib = size / 2**30
    return f"{number(gib)} GiB" if gib >= 1 else f"{number(size / 2**20)} MiB"
