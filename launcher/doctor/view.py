"""How ``tfcluster doctor``'s report reads: three tables (hosts, links, checkpoint storage), then
the findings (:mod:`launcher.doctor.findings`), the notes, one line per host that could not be
measured with what to do, and a summary line; rich when the output is a terminal, plain text
otherwise, as pre-flight's. :func:`report_dict` is the ``--json`` form (a contract: keep its keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from launcher.doctor import units
from launcher.doctor.findings import findings
from launcher.doctor.report import DoctorReport, HostResult, LinkResult, StorageResult, Transfer
from launcher.preflight.view import wants_rich

Section = tuple[tuple[str, ...], list[tuple[str, ...]]]


def _host_row(report: DoctorReport, host: HostResult) -> tuple[str, ...]:
    facts, clock = host.facts, host.clock
    memory = cpus = offset = "-"
    if facts is not None:
        if facts.memory_available is not None:
            memory = f"{units.memory(facts.memory_available)} of {units.memory(facts.memory_total)}"
        cpus = str(facts.cpus) if facts.cpus == facts.cpu_count \
            else f"{facts.cpus} of {facts.cpu_count}"
    if clock is not None:
        offset = f"{units.signed_millis(clock.offset_ms)} (± {clock.uncertainty_ms:.1f})"
    rate = report.host_mbit_s(host.host)
    return (host.host, host.target, host.address, memory, cpus, offset,
            "-" if rate is None else units.bits(rate),
            "ok" if host.problem is None else f"FAIL: {host.problem}")


def _way(transfer: Transfer | None) -> str:
    return "-" if transfer is None else units.bits(transfer.mbit_s)


def _link_row(link: LinkResult) -> tuple[str, ...]:
    slower = link.slower
    return (link.name, "-" if link.rtt_ms is None else units.millis(link.rtt_ms),
            _way(link.a_to_b), _way(link.b_to_a),
            f"FAIL: {link.problem}" if link.problem else
            "-" if slower is None else f"{units.bits(slower.mbit_s)} "
            f"({units.bytes_rate(slower.mb_s)})")


def _storage_row(result: StorageResult) -> tuple[str, ...]:
    write, read = result.write_mb_s, result.read_mb_s
    if result.problem:
        return (result.host, result.directory, "-", "-", f"FAIL: {result.problem}")
    return (result.host, result.directory,
            "-" if write is None else f"{units.bytes_rate(write)} "
            f"({units.memory(result.write_bytes)}, fsync'd)",
            "-" if read is None else units.bytes_rate(read)
            + ("" if result.cache_dropped else " (page cache not dropped)"), "ok")


def sections(report: DoctorReport) -> list[Section]:
    """The tables: headers and rows each (an empty table is left out)."""
    found: list[Section] = [(("HOST", "REACHED AT", "PEERS USE", "MEMORY FREE", "CPUS",
                              "CLOCK VS COORDINATOR", "LINKS (MEDIAN)", "RESULT"),
                             [_host_row(report, h) for h in report.hosts])]
    if report.links:
        found.append((("LINK", "ROUND TRIP", "A -> B", "B -> A", "SLOWER WAY"),
                      [_link_row(link) for link in report.links]))
    if report.storage:
        found.append((("STORAGE", "CHECKPOINT DIR", "WRITE", "READ", "RESULT"),
                       [_storage_row(s) for s in report.storage]))
    return found


def summary_line(report: DoctorReport) -> str:
    took = f"in {report.duration_s:.1f}s"
    failed = [h.host for h in report.hosts if h.problem]
    if failed:
        return (f"doctor: {len(failed)} of {len(report.hosts)} host(s) could not be measured "
                f"({', '.join(failed)}) {took}")
    if not report.ok:
        return f"doctor: not everything could be measured (above) {took}"
    return f"doctor: {len(report.hosts)} host(s) measured {took}"


def text_lines(report: DoctorReport) -> list[str]:
    """Everything under the tables: findings, notes, problems and what to do."""
    lines = [f.text for f in findings(report)] + list(report.notes)
    lines += report.problems()
    lines += [f"{h.host}: {h.detail}" for h in report.hosts if h.detail]
    return lines


def _plain_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    table = [headers, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)),
                       row[-1]]).rstrip() for row in table]


def render_text(report: DoctorReport) -> str:
    lines: list[str] = []
    for headers, rows in sections(report):
        lines += [*_plain_table(headers, rows), ""]
    return "\n".join([*lines, *text_lines(report), summary_line(report)])


def print_report(report: DoctorReport, stream: TextIO) -> None:
    """The tables and lines on ``stream``: rich on a terminal, plain text otherwise."""
    if not wants_rich(stream):
        stream.write(render_text(report) + "\n")
        stream.flush()
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, highlight=False)
    for headers, rows in sections(report):
        table = Table(header_style="bold")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            style = "red" if row[-1].startswith("FAIL") else ""
            table.add_row(*(Text(cell) for cell in row[:-1]), Text(row[-1], style=style))
        console.print(table)
    for line in text_lines(report):
        console.print(Text(line))
    console.print(Text(summary_line(report), style="bold" if report.ok else "bold red"))


def _transfer(transfer: Transfer | None) -> dict[str, Any] | None:
    if transfer is None:
        return None
    return {"from": transfer.sender, "to": transfer.receiver, "bytes": transfer.bytes,
            "seconds": transfer.seconds, "mbit_s": transfer.mbit_s, "mb_s": transfer.mb_s}


def report_dict(report: DoctorReport) -> dict[str, Any]:
    """The ``--json`` form: every figure in fixed units (bytes, ms, Mbit/s, MB/s)."""
    return {
        "ok": report.ok,
        "duration_s": report.duration_s,
        "hosts": [{
            "host": h.host, "target": h.target, "address": h.address,
            "memory_available_bytes": h.facts.memory_available if h.facts else None,
            "memory_total_bytes": h.facts.memory_total if h.facts else None,
            "cpus": h.facts.cpus if h.facts else None,
            "cpu_count": h.facts.cpu_count if h.facts else None,
            "load1": h.facts.load1 if h.facts else None,
            "clock_offset_ms": h.clock.offset_ms if h.clock else None,
            "clock_uncertainty_ms": h.clock.uncertainty_ms if h.clock else None,
            "links_median_mbit_s": report.host_mbit_s(h.host),
            "problem": h.problem,
        } for h in report.hosts],
        "links": [{
            "a": link.a, "b": link.b, "rtt_ms": link.rtt_ms,
            "a_to_b": _transfer(link.a_to_b), "b_to_a": _transfer(link.b_to_a),
            "mbit_s": link.mbit_s, "problem": link.problem,
        } for link in report.links],
        "storage": [{
            "host": s.host, "dir": s.directory, "write_mb_s": s.write_mb_s,
            "read_mb_s": s.read_mb_s, "bytes": s.write_bytes,
            "cache_dropped": s.cache_dropped, "problem": s.problem,
        } for s in report.storage],
        "findings": [{"kind": f.kind, "subject": f.subject, "value": f.value,
                      "median": f.median, "ratio": f.ratio, "text": f.text}
                     for f in findings(report)],
        "notes": list(report.notes),
        "problems": report.problems(),
    }
