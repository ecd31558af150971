"""What the doctor's figures say, against the median of their kind: the slowest link, the slowest
host (the median of its links: a host whose every link is slow has the problem, not a link), the
link with the longest round trip when it is another one, the slowest checkpoint storage, and how
far apart the clocks are. Pure: a report in, findings out."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from launcher.doctor import units
from launcher.doctor.clock import spread
from launcher.doctor.report import DoctorReport, LinkResult, StorageResult

Kind = Literal["slowest_link", "slowest_host", "longest_round_trip", "slowest_storage", "clock"]
#: A round trip this many times the median is worth naming (on its own link).
ROUND_TRIP_FACTOR = 2.0


@dataclass(frozen=True)
class Finding:
    """One thing the doctor names: ``subject`` (a link ``a <-> b`` or a host), its ``value`` (in
    the kind's unit: Mbit/s, ms, MB/s), the ``median`` of its kind and the line shown."""

    kind: Kind
    subject: str
    value: float
    median: float | None
    text: str

    @property
    def ratio(self) -> float | None:
        return self.value / self.median if self.median else None


def findings(report: DoctorReport) -> list[Finding]:
    """Everything worth naming in ``report``, most telling first."""
    found: list[Finding] = []
    measured = [link for link in report.links if link.mbit_s is not None]
    if measured:
        found.append(_slowest_link(measured))
        host = _slowest_host(report)
        if host is not None:
            found.append(host)
        trip = _longest_round_trip(measured, found[0].subject)
        if trip is not None:
            found.append(trip)
    storage = _slowest_storage([s for s in report.storage if s.write_mb_s is not None])
    if storage is not None:
        found.append(storage)
    clock = _clock(report)
    if clock is not None:
        found.append(clock)
    return found


def _against(value: float, median: float | None, what: str, show: str) -> str:
    """``, 1.28% of the median host (1.51 Gbit/s)``, ``, 25.0x the median round trip (0.2 ms)``."""
    if median is None or median <= 0:
        return ""
    ratio = value / median
    share = f"{units.number(ratio)}x the" if ratio >= 1.5 else f"{units.number(ratio * 100)}% of the"
    return f", {share} median {what} ({show})"


def _slowest_link(links: list[LinkResult]) -> Finding:
    # against every direction measured: with one slow host most links may touch it, and the
    # median of the links' slower ways would be its own speed
    rates = [way.mbit_s for link in links for way in (link.a_to_b, link.b_to_a) if way is not None]
    worst = min(links, key=lambda link: link.mbit_s or 0.0)
    rate = worst.mbit_s or 0.0
    slower = worst.slower
    median = statistics.median(rates) if len(links) > 1 else None
    text = (f"{'slowest link' if median is not None else 'the one link'}: {worst.name}, "
            f"{units.bits(rate)} ({units.bytes_rate(slower.mb_s if slower else 0.0)}"
            + (f", {slower.sender} -> {slower.receiver}" if slower else "") + ")"
            + _against(rate, median, "stream", units.bits(median or 0.0))
            + (f"; round trip {units.millis(worst.rtt_ms)}" if worst.rtt_ms is not None else ""))
    return Finding("slowest_link", worst.name, rate, median, text)


def _slowest_host(report: DoctorReport) -> Finding | None:
    """Only with three hosts or more: with two, both have the one link."""
    rates = {h.host: rate for h in report.hosts if (rate := report.host_mbit_s(h.host)) is not None}
    if len(rates) < 3:
        return None
    host = min(rates, key=lambda name: rates[name])
    median = statistics.median(rates.values())
    text = (f"slowest host: {host}, its links' median {units.bits(rates[host])}"
            + _against(rates[host], median, "host", units.bits(median)))
    return Finding("slowest_host", host, rates[host], median, text)


def _longest_round_trip(links: list[LinkResult], slowest: str) -> Finding | None:
    trips = [link for link in links if link.rtt_ms is not None]
    if len(trips) < 2:
        return None
    median = statistics.median(link.rtt_ms or 0.0 for link in trips)
    worst = max(trips, key=lambda link: link.rtt_ms or 0.0)
    value = worst.rtt_ms or 0.0
    if worst.name == slowest or value < ROUND_TRIP_FACTOR * median:
        return None
    text = (f"longest round trip: {worst.name}, {units.millis(value)}"
            + _against(value, median, "round trip", units.millis(median)))
    return Finding("longest_round_trip", worst.name, value, median, text)


def _slowest_storage(results: list[StorageResult]) -> Finding | None:
    """Only when more than one host reads the checkpoint dir."""
    if len(results) < 2:
        return None
    worst = min(results, key=lambda s: s.write_mb_s or 0.0)
    median = statistics.median(s.write_mb_s or 0.0 for s in results)
    value = worst.write_mb_s or 0.0
    text = (f"slowest checkpoint storage: {worst.host}, writes {units.bytes_rate(value)}"
            + _against(value, median, "host", units.bytes_rate(median))
            + (f", reads {units.bytes_rate(worst.read_mb_s)}" if worst.read_mb_s else ""))
    return Finding("slowest_storage", worst.host, value, median, text)


def _clock(report: DoctorReport) -> Finding | None:
    offsets = [(h.host, h.clock) for h in report.hosts if h.clock is not None]
    if not offsets:
        return None
    far_host, far = max(offsets, key=lambda pair: abs(pair[1].offset_ms))
    apart = spread([clock for _, clock in offsets])
    text = (f"clock{'s' if apart else ''}: {far_host} is {units.signed_millis(far.offset_ms)} "
            f"(± {far.uncertainty_ms:.1f}) from the coordinator's"
            + (f", the farthest; the hosts are within {apart.offset_ms:.1f} ms "
               f"(± {apart.uncertainty_ms:.1f}) of each other" if apart else ""))
    return Finding("clock", far_host, far.offset_ms, None, text)
