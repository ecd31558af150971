"""Pre-flight as a user sees it, whatever the engine: one table, a rich one on a terminal, aligned
plain text otherwise; or one line per host (:func:`report_lines`) where a table is too much.

One row per host (every check's cell and its result), then, under the table, the full explanation
and what to do for each host that has a problem. :func:`report_before_run` is the gate ``tfcluster
run`` passes through before it starts a job on an engine that probes its hosts first.
"""

from __future__ import annotations

import os
from typing import TextIO

from launcher.preflight.report import HostReport, PreflightReport

HEADERS = ("HOST", "SSH TARGET", "CONNECT", "PYTHON", "WORKER", "TFCLUSTER", "TENSORFLOW",
           "PORTS", "CHECKPOINT", "GPUS", "RESULT")


def result_cell(report: HostReport) -> str:
    if report.problems:
        return "FAIL: " + "; ".join(report.problems)
    if report.warnings:
        return "ok (warning: " + "; ".join(report.warnings) + ")"
    return "ok"


def rows(report: PreflightReport) -> list[tuple[str, ...]]:
    return [(h.host, h.target, h.connect, h.python, h.worker, h.tfcluster, h.tensorflow,
             h.ports, h.checkpoint, h.gpus, result_cell(h)) for h in report.hosts]


def summary_line(report: PreflightReport) -> str:
    failed = [h.host for h in report.hosts if not h.ok]
    took = f"in {report.duration_s:.1f}s"
    if failed:
        return (f"preflight: {len(failed)} of {len(report.hosts)} host(s) not ready "
                f"({', '.join(failed)}) {took}")
    return f"preflight: all {len(report.hosts)} host(s) ready {took}"


def detail_lines(report: PreflightReport) -> list[str]:
    return [f"{h.host}: {detail}" for h in report.hosts for detail in h.details]


def report_lines(report: PreflightReport) -> list[str]:
    """One line per host, ``NAME: python V, tfcluster V: ok`` or its problems, then the full
    explanations (as under the table)."""
    lines = []
    for host in report.hosts:
        python = host.python if host.python != "-" else "?"
        tfcluster = host.tfcluster if host.tfcluster != "-" else "?"
        status = "; ".join(host.problems) if host.problems else result_cell(host)
        lines.append(f"{host.host}: python {python}, tfcluster {tfcluster}: {status}")
    return [*lines, *detail_lines(report)]


def render_text(report: PreflightReport) -> str:
    table = [HEADERS, *rows(report)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS) - 1)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)),
                        row[-1]]).rstrip() for row in table]
    details = detail_lines(report)
    return "\n".join([*lines, *(["", *details] if details else []), summary_line(report)])


def wants_rich(stream: TextIO) -> bool:
    """Rich tables on ``stream``: a terminal (or FORCE_COLOR says so anyway). ``NO_COLOR`` takes
    the colour away, not the table (rich honours it)."""
    return bool(os.environ.get("FORCE_COLOR")) or stream.isatty()


def print_report(report: PreflightReport, stream: TextIO) -> None:
    """Print the report to ``stream`` in its layout: one line per host, or the table (rich when
    ``stream`` is a terminal, plain text otherwise)."""
    if report.layout == "lines":
        stream.write("".join(f"{line}\n" for line in report_lines(report)))
        stream.flush()
        return
    if not wants_rich(stream):
        stream.write(render_text(report) + "\n")
        stream.flush()
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(header_style="bold")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for host, row in zip(report.hosts, rows(report), strict=True):
        style = "red" if not host.ok else ("yellow" if host.warnings else "green")
        table.add_row(*(Text(cell) for cell in row[:-1]), Text(row[-1], style=style))
    console = Console(file=stream, highlight=False)
    console.print(table)
    for line in detail_lines(report):
        console.print(Text(line))
    console.print(Text(summary_line(report), style="bold" if report.ok else "bold red"))


def report_before_run(report: PreflightReport, job: str, stream: TextIO) -> bool:
    """What ``tfcluster run`` shows of its pre-flight: one summary line (and any warnings) when
    every host is ready, the whole report otherwise. True to go on."""
    if report.ok:
        stream.write(f"tfcluster: {summary_line(report)}\n")
        for host in report.hosts:
            for warning in host.warnings:
                stream.write(f"tfcluster: {host.host}: warning: {warning}\n")
        stream.flush()
        return True
    if report.layout == "lines":
        stream.write(f"tfcluster: job {job} not started: pre-flight found problems on its "
                     "hosts:\n" + "".join(f"  {line}\n" for line in report_lines(report)))
        stream.flush()
        return False
    print_report(report, stream)
    stream.write(f"tfcluster: job {job} not started: not every host is ready (above)\n")
    stream.flush()
    return False
