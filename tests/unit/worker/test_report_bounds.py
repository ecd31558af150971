"""``worker.report`` with many metrics or an impossible step (issue 25, items 5 and 6): a wide
report is kept (its step always; its metrics up to the line bound, the rest counted), and a step
that is not a whole number from 0 to 2**63-1 is refused in the task with a clear error, and by the
agent's check of the line."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest

from worker import reporting
from worker.reporting import report
from worker.wire import env
from worker.wire.reports import (
    MAX_DEPTH,
    MAX_PROGRESS_LINE_BYTES,
    BadReport,
    StepReport,
    parse_report,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The read end of the task's report pipe (nonblocking), the write end in the env."""
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # room for a few wide reports, unread
    os.set_blocking(read_fd, False)
    monkeypatch.setitem(reporting._state, "broken", False)
    monkeypatch.setitem(reporting._state, "trimmed_told", False)
    monkeypatch.setenv(env.REPORT_FD, str(write_fd))
    yield read_fd
    reporting.flush()  # nothing left for the sender to write into a closed (reused) fd
    os.close(read_fd)
    os.close(write_fd)


def reports(read_fd: int) -> list[StepReport]:
    reporting.flush()
    data = b""
    while True:
        try:
            chunk = os.read(read_fd, 1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    found = [parse_report(line) for line in data.splitlines()]
    assert all(isinstance(r, StepReport) for r in found)
    return found  # type: ignore[return-value]


def gradient_norms(count: int) -> dict[str, float]:
    return {f"grad_norm/model/dense_{i}/kernel:0": 0.123456789 + i for i in range(count)}


def test_a_report_of_a_thousand_metrics_is_kept_whole(pipe: int,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    metrics = gradient_norms(1000)
    report(7, loss=0.5, **metrics)
    (got,) = reports(pipe)
    assert got.step == 7 and got.metrics == {"loss": 0.5, **metrics}
    assert got.dropped_metrics == 0
    assert capsys.readouterr().err == ""


def test_a_wider_report_keeps_its_step_and_what_fits_and_says_so_once(
        pipe: int, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = gradient_norms(5000)
    report(1, **metrics)
    reporting.flush()  # written, not replaced by the next one
    report(2, **metrics)
    first, second = reports(pipe)
    assert (first.step, second.step) == (1, 2)
    assert first.metrics and len(first.metrics) + first.dropped_metrics == 5000
    assert all(metrics[name] == value for name, value in first.metrics.items())
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "left out" in err and "summary.json" in err


def test_the_line_stays_within_its_bound(pipe: int) -> None:
    report(3, huge="x" * (2 * MAX_PROGRESS_LINE_BYTES), loss=0.25)
    (got,) = reports(pipe)
    assert got.metrics == {"loss": 0.25} and got.dropped_metrics == 1


@pytest.mark.parametrize("step", [2**70, 2**63, -1])
def test_a_step_out_of_range_is_refused_in_the_task(step: int, pipe: int) -> None:
    with pytest.raises(ValueError, match=r"step .* out of range"):
        report(step, loss=1.0)
    assert reports(pipe) == []


@pytest.mark.parametrize("step", ["5", 1.5, float("nan"), True, None])
def test_a_step_that_is_not_a_whole_number_is_refused(step: object, pipe: int) -> None:
    with pytest.raises(TypeError, match="step must be a whole number"):
        report(step)  # type: ignore[arg-type]
    assert reports(pipe) == []


def test_the_step_is_checked_outside_tfcluster_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env.REPORT_FD, raising=False)
    with pytest.raises(ValueError, match="out of range"):
        report(2**70)


class NumpyInt:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_whole_numbers_of_other_types_are_steps(pipe: int) -> None:
    for step in (NumpyInt(4), 5.0, 2**63 - 1):
        report(step)  # type: ignore[arg-type]
        reporting.flush()  # each written, not replaced by the next one
    assert [r.step for r in reports(pipe)] == [4, 5, 2**63 - 1]


@pytest.mark.parametrize("line", [b'{"kind":"progress","step":1180591620717411303424}',
                                  b'{"kind":"progress","step":-3}',
                                  b'{"kind":"progress","step":1,"dropped_metrics":-1}',
                                  b'{"kind":"progress","step":1,"dropped_metrics":"many"}'])
def test_the_agent_refuses_a_line_with_an_impossible_step(line: bytes) -> None:
    with pytest.raises(BadReport):
        parse_report(line)


def _nested(levels: int) -> bytes:
    """A report whose data nests ``levels`` deep (the report's object is the first level)."""
    return b'{"kind":"custom","x":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


def test_the_agent_refuses_a_report_nested_too_deep() -> None:
    assert parse_report(_nested(MAX_DEPTH)).kind == "custom"
    with pytest.raises(BadReport, match=f"nested more than {MAX_DEPTH} deep"):
        parse_report(_nested(MAX_DEPTH + 1))


def test_brackets_inside_strings_are_no_nesting() -> None:
    """A shallow report whose text holds many brackets is taken (the cheap count of brackets
    only decides whether the depth is measured)."""
    line = b'{"kind":"progress","step":3,"metrics":{"note":"' + b"[{" * 100 + b'"}}'
    report = parse_report(line)
    assert isinstance(report, StepReport) and report.metrics == {"note": "[{" * 100}
