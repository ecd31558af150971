"""What pre-flight found, whatever the engine: one :class:`HostReport` per host, the
:class:`PreflightReport` of them all, and the one rule across hosts (the same TensorFlow everywhere
it is installed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: How a report is shown (:mod:`launcher.preflight.view`): a table with a column per check, or
#: one line per host for engines whose hosts need no connection details (an allocation's nodes).
Layout = Literal["table", "lines"]


@dataclass
class HostReport:
    """What preflight found on one host. Cells are short, for the table; ``details`` carry the
    full explanations printed under it."""

    host: str
    target: str  # where the host is reached: "local", user@address:port, ...
    connect: str = "-"
    python: str = "-"
    worker: str = "-"
    tfcluster: str = "-"  # the version of tfcluster the host's worker package is
    tensorflow: str = "-"
    ports: str = "-"
    checkpoint: str = "-"
    gpus: str = "-"
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    tensorflow_version: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, summary: str, detail: str = "") -> None:
        self.problems.append(summary)
        if detail and detail != summary:
            self.details.append(detail)


@dataclass(frozen=True)
class PreflightReport:
    hosts: tuple[HostReport, ...]
    duration_s: float
    layout: Layout = "table"

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)


def compare_tensorflow(reports: list[HostReport]) -> None:
    versions = {r.host: r.tensorflow_version for r in reports if r.tensorflow_version}
    if len(set(versions.values())) <= 1:
        return
    for report in reports:
        mine = versions.get(report.host)
        if mine is None:
            continue
        others = sorted({f"{v} on {h}" for h, v in versions.items() if v != mine})
        report.tensorflow = f"{mine} (DIFFERS)"
        report.fail(f"tensorflow {mine} here but {', '.join(others)}")
