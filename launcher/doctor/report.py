"""What ``tfcluster doctor`` measured: per host (its memory, CPUs and clock), per link between two
hosts (round trip, throughput each way), per host that reads the checkpoint directory (its write
and read speed), and what could not be measured, per host. Plain frozen data; what it means is
:mod:`launcher.doctor.findings`, how it is shown :mod:`launcher.doctor.view`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from launcher.doctor.clock import ClockOffset

MEGA = 1e6


@dataclass(frozen=True)
class HostFacts:
    memory_available: int | None  # bytes tasks could still use (a cgroup's limit if lower)
    memory_total: int
    cpus: int  # usable by a task started there (the affinity mask)
    cpu_count: int  # the machine's
    load1: float | None
    hostname: str


@dataclass(frozen=True)
class HostResult:
    """One host: where it is reached (``target``), the address its peers use (its tasks'
    TF_CONFIG address), what it said of itself, and ``problem``, one line, when it could not
    be measured (``detail``: the full explanation and what to do)."""

    host: str
    address: str
    target: str
    facts: HostFacts | None = None
    clock: ClockOffset | None = None
    problem: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class Transfer:
    """One stream from ``sender`` to ``receiver``: bytes the receiver confirmed, and seconds from
    the first byte to the confirmation."""

    sender: str
    receiver: str
    bytes: int
    seconds: float

    @property
    def mbit_s(self) -> float:
        return self.bytes * 8 / MEGA / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.bytes / MEGA / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class LinkResult:
    """The link between hosts ``a`` and ``b``: the median one-byte round trip, a stream each
    way, or why it could not be measured."""

    a: str
    b: str
    rtt_ms: float | None = None
    a_to_b: Transfer | None = None
    b_to_a: Transfer | None = None
    problem: str | None = None

    @property
    def slower(self) -> Transfer | None:
        """The slower direction: what a ring all-reduce over this link gets."""
        ways = [t for t in (self.a_to_b, self.b_to_a) if t is not None]
        return min(ways, key=lambda t: t.mbit_s) if ways else None

    @property
    def mbit_s(self) -> float | None:
        slower = self.slower
        return None if slower is None else slower.mbit_s

    def has(self, host: str) -> bool:
        return host in (self.a, self.b)

    @property
    def name(self) -> str:
        return f"{self.a} <-> {self.b}"


@dataclass(frozen=True)
class StorageResult:
    """The checkpoint directory as ``host`` sees it: a test file written (``fsync``\\ ed) and
    read back (its pages dropped first), or why not."""

    host: str
    directory: str
    write_bytes: int = 0
    write_s: float = 0.0
    read_bytes: int = 0
    read_s: float = 0.0
    cache_dropped: bool = True
    problem: str | None = None

    @property
    def write_mb_s(self) -> float | None:
        return self.write_bytes / MEGA / self.write_s if self.write_s > 0 else None

    @property
    def read_mb_s(self) -> float | None:
        return self.read_bytes / MEGA / self.read_s if self.read_s > 0 else None


@dataclass(frozen=True)
class DoctorReport:
    hosts: tuple[HostResult, ...]
    links: tuple[LinkResult, ...]
    storage: tuple[StorageResult, ...]
    #: One line each: what was not measured and why that is normal (a single-host spec has no
    #: links, a spec without a checkpoint dir no storage).
    notes: tuple[str, ...]
    duration_s: float

    def problems(self) -> list[str]:
        """One line per host that could not be reached or measured, then per link and storage
        measurement that failed between hosts that were."""
        lines = [f"{h.host}: {h.problem}" for h in self.hosts if h.problem]
        lines += [f"{link.name}: {link.problem}" for link in self.links if link.problem]
        lines += [f"{s.host}: checkpoint dir {s.directory}: {s.problem}"
                  for s in self.storage if s.problem]
        return lines

    @property
    def ok(self) -> bool:
        """Everything could be measured."""
        return not self.problems()

    def host_mbit_s(self, host: str) -> float | None:
        """The median throughput of ``host``'s measured links."""
        rates = [rate for link in self.links if link.has(host)
                 if (rate := link.mbit_s) is not None]
        return statistics.median(rates) if rates else None
