"""What the doctor names: the slowest link and host against the median, with their numbers."""

from __future__ import annotations

import pytest

from launcher.doctor.findings import Finding, findings
from launcher.doctor.report import DoctorReport, StorageResult
from tests.unit.doctor.reports import host, link, three_hosts_h2_slow


def by_kind(report: DoctorReport) -> dict[str, Finding]:
    return {f.kind: f for f in findings(report)}


def test_the_rate_limited_host_is_named_with_its_link_and_throughput() -> None:
    found = by_kind(three_hosts_h2_slow())
    slowest = found["slowest_link"]
    assert slowest.subject == "h2 <-> h3"  # its slower way: 19 Mbit/s from h3 into h2
    assert slowest.value == pytest.approx(19.0)
    # against every stream (two of the three links go to h2: their slower ways are its speed)
    assert slowest.median == pytest.approx(2950.0)
    assert slowest.text == ("slowest link: h2 <-> h3, 19.0 Mbit/s (2.38 MB/s, h3 -> h2), 0.644% "
                            "of the median stream (2.95 Gbit/s); round trip 0.1 ms")
    named = found["slowest_host"]
    assert named.subject == "h2"
    assert named.value == pytest.approx(19.25)  # the median of its two links
    assert named.median == pytest.approx(1509.5)  # h3's: 3000 and 19 Mbit/s
    assert named.ratio == pytest.approx(19.25 / 1509.5)
    assert named.text == ("slowest host: h2, its links' median 19.2 Mbit/s, 1.28% of the "
                          "median host (1.51 Gbit/s)")


def test_a_link_is_as_fast_as_its_slower_way() -> None:
    measured = link("a1", "b2", 10.0, 900.0)
    assert measured.mbit_s == pytest.approx(10.0)
    assert measured.slower is not None and measured.slower.sender == "a1"


def test_two_hosts_have_one_link_and_no_slowest_host() -> None:
    report = DoctorReport((host("h1"), host("h2")), (link("h1", "h2", 940.0, 935.0),), (), (), 3.0)
    found = by_kind(report)
    assert "slowest_host" not in found
    one = found["slowest_link"]
    assert one.median is None
    assert one.text == "the one link: h1 <-> h2, 935 Mbit/s (117 MB/s, h2 -> h1); round trip 0.1 ms"


def test_a_balanced_cluster_names_its_slowest_link_at_the_median() -> None:
    report = DoctorReport((host("h1"), host("h2"), host("h3")),
                          (link("h1", "h2", 940, 941), link("h1", "h3", 939, 940),
                           link("h2", "h3", 941, 942)), (), (), 3.0)
    found = by_kind(report)
    assert found["slowest_link"].subject == "h1 <-> h3"
    assert "99.8% of the median stream (940 Mbit/s)" in found["slowest_link"].text
    assert found["slowest_host"].ratio == pytest.approx(1.0, abs=0.01)


def test_a_long_round_trip_on_another_link_is_named_against_the_median() -> None:
    report = DoctorReport((host("h1"), host("h2"), host("h3")),
                          (link("h1", "h2", 100, 100, rtt_ms=0.1),
                           link("h1", "h3", 900, 900, rtt_ms=5.0),
                           link("h2", "h3", 900, 900, rtt_ms=0.2)), (), (), 3.0)
    trip = by_kind(report)["longest_round_trip"]
    assert trip.subject == "h1 <-> h3"
    assert trip.text == ("longest round trip: h1 <-> h3, 5.00 ms, 25.0x the median round trip "
                         "(0.2 ms)")


def test_no_round_trip_finding_when_the_longest_is_near_the_median() -> None:
    assert "longest_round_trip" not in by_kind(three_hosts_h2_slow())


def test_the_slowest_storage_is_named_when_several_hosts_read_the_checkpoint_dir() -> None:
    storage = tuple(StorageResult(name, "/shared", 100 * 10**6, seconds, 100 * 10**6, 0.1)
                    for name, seconds in (("h1", 0.5), ("h2", 0.4), ("h3", 5.0)))
    report = DoctorReport((host("h1"), host("h2"), host("h3")), (), storage, (), 9.0)
    slow = by_kind(report)["slowest_storage"]
    assert slow.subject == "h3"
    assert slow.text == ("slowest checkpoint storage: h3, writes 20.0 MB/s, 10.0% of the median "
                         "host (200 MB/s), reads 1.00 GB/s")
    assert "slowest_storage" not in by_kind(three_hosts_h2_slow())  # one reader: the table says


def test_the_clock_farthest_from_the_coordinators_and_the_hosts_spread() -> None:
    clock = by_kind(three_hosts_h2_slow())["clock"]
    assert clock.subject == "h2"
    assert clock.text == ("clocks: h2 is -3.0 ms (± 0.2) from the coordinator's, the farthest; "
                          "the hosts are within 4.0 ms (± 0.5) of each other")


def test_unreached_hosts_give_no_findings_about_links() -> None:
    report = DoctorReport((host("h1"), host("h2", problem="unreachable")), (), (), (), 10.0)
    assert [f.kind for f in findings(report)] == ["clock"]
