"""How the doctor's report reads: the tables, the findings under them, one line per host that
could not be measured, and the ``--json`` form."""

from __future__ import annotations

import io
import json

import pytest

from launcher.doctor.report import DoctorReport
from launcher.doctor.view import print_report, render_text, report_dict
from tests.unit.doctor.reports import host, link, three_hosts_h2_slow


def test_the_table_shows_every_host_link_and_the_storage_with_numbers() -> None:
    text = render_text(three_hosts_h2_slow())
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("HOST"))
    assert header.split() == ["HOST", "REACHED", "AT", "PEERS", "USE", "MEMORY", "FREE", "CPUS",
                              "CLOCK", "VS", "COORDINATOR", "LINKS", "(MEDIAN)", "RESULT"]
    h2 = next(line for line in lines if line.startswith("h2 "))
    assert "6.00 GiB of 8.00 GiB" in h2 and "-3.0 ms (± 0.2)" in h2 and "19.2 Mbit/s" in h2
    assert h2.endswith("ok")
    link_row = next(line for line in lines if line.startswith("h1 <-> h2"))
    assert link_row.split()[3:] == ["0.1", "ms", "19.5", "Mbit/s", "3.00", "Gbit/s", "19.5",
                                    "Mbit/s", "(2.44", "MB/s)"]
    storage = next(line for line in lines if line.startswith("h1 ") and "/ckpt" in line)
    assert "134 MB/s (64.0 MiB, fsync'd)" in storage and "268 MB/s" in storage
    assert "slowest host: h2, its links' median 19.2 Mbit/s" in text
    assert lines[-1] == "doctor: 3 host(s) measured in 7.5s"


def test_a_host_that_could_not_be_reached_has_its_line_and_what_to_do() -> None:
    report = DoctorReport((host("h1"), host("h2"), host("h3", problem="cannot connect: timed out")),
                          (link("h1", "h2", 900, 900),), (), (), 12.0)
    text = render_text(report)
    assert "h3: cannot connect: timed out" in text.splitlines()
    assert "h3: check h3's sshd" in text.splitlines()
    assert text.splitlines()[-1] == "doctor: 1 of 3 host(s) could not be measured (h3) in 12.0s"
    assert not report.ok


def test_notes_say_what_was_not_measured_and_why() -> None:
    note = "every task runs on this machine: no links between hosts to measure"
    report = DoctorReport((host("h1"),), (), (), (note,), 2.0)
    text = render_text(report)
    assert note in text.splitlines()
    assert "ROUND TRIP" not in text and "STORAGE" not in text  # no empty tables
    assert report.ok


def test_json_has_every_figure_in_fixed_units() -> None:
    data = report_dict(three_hosts_h2_slow())
    assert json.loads(json.dumps(data)) == data  # plain JSON
    assert data["ok"] is True and data["problems"] == []
    assert [h["host"] for h in data["hosts"]] == ["h1", "h2", "h3"]
    h2 = data["hosts"][1]
    assert h2["memory_available_bytes"] == 6 * 2**30 and h2["cpus"] == 4
    assert h2["clock_offset_ms"] == pytest.approx(-3.0)
    assert h2["links_median_mbit_s"] == pytest.approx(19.25)
    first = data["links"][0]
    assert (first["a"], first["b"], first["rtt_ms"]) == ("h1", "h2", 0.1)
    assert first["a_to_b"]["mbit_s"] == pytest.approx(19.5)
    assert first["b_to_a"]["from"] == "h2" and first["mbit_s"] == pytest.approx(19.5)
    assert data["storage"][0]["write_mb_s"] == pytest.approx(64 * 2**20 / 1e6 / 0.5)
    kinds = {f["kind"]: f for f in data["findings"]}
    assert kinds["slowest_host"]["subject"] == "h2"
    assert kinds["slowest_link"]["value"] == pytest.approx(19.0)


def test_rich_output_on_a_terminal_has_the_same_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    print_report(three_hosts_h2_slow(), out)
    text = out.getvalue()
    assert "slowest host: h2" in text and "h1 <-> h2" in text and "19.2 Mbit/s" in text
