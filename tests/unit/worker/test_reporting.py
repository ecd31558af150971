"""``worker.report()``: strict-JSON lines on the agent's pipe (batched: :func:`reporting.flush`
writes what is pending), nothing outside tfcluster."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest

from worker import reporting
from worker.reporting import report, send
from worker.wire import env


class NumpyScalar:
    """Like ``numpy.float32(x)``: not a Python float, converts with ``.item()`` / ``.tolist()``."""

    def __init__(self, value: float | int) -> None:
        self.value = value

    def item(self) -> float | int:
        return self.value

    def tolist(self) -> float | int:
        return self.value


class EagerScalar:
    """Like a scalar ``tf.Tensor``: no ``.item()``, ``.numpy()`` returns a numpy scalar."""

    def __init__(self, value: float | int) -> None:
        self.value = value

    def numpy(self) -> NumpyScalar:
        return NumpyScalar(self.value)


def _reject_constant(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def parse(line: bytes) -> dict[str, Any]:
    """Parse one line as strict JSON (``NaN`` / ``Infinity`` tokens are not JSON)."""
    return dict(json.loads(line, parse_constant=_reject_constant))


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    monkeypatch.setitem(reporting._state, "broken", False)
    monkeypatch.delenv(env.REPORT_FD, raising=False)
    yield read_fd, write_fd
    reporting.flush()  # nothing left for the sender to write into a closed (reused) fd
    os.close(read_fd)
    os.close(write_fd)


def written(read_fd: int) -> list[bytes]:
    reporting.flush()
    try:
        data = os.read(read_fd, 1 << 16)
    except BlockingIOError:
        return []
    assert data.endswith(b"\n")
    return data.splitlines()


def test_report_is_a_no_op_outside_tfcluster(pipe: tuple[int, int]) -> None:
    read_fd, _ = pipe
    report(1, loss=0.5)
    assert send({"kind": "progress", "step": 1}) is False
    assert written(read_fd) == []


def test_one_json_line_per_report(pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, write_fd = pipe
    monkeypatch.setenv(env.REPORT_FD, str(write_fd))
    report(1, loss=0.5)
    report(2)
    report(3, loss=0.25, accuracy=0.75)
    lines = written(read_fd)
    assert [parse(line) for line in lines] == [
        {"kind": "progress", "step": 1, "metrics": {"loss": 0.5}},
        {"kind": "progress", "step": 2, "metrics": {}},
        {"kind": "progress", "step": 3, "metrics": {"loss": 0.25, "accuracy": 0.75}},
    ]


METRICS = [
    # (value passed to report, value the agent must read)
    pytest.param(0.25, 0.25, id="float"),
    pytest.param(7, 7, id="int"),
    pytest.param(True, True, id="bool"),
    pytest.param("warmup", "warmup", id="str"),
    pytest.param(float("nan"), "nan", id="nan"),
    pytest.param(float("inf"), "inf", id="inf"),
    pytest.param(float("-inf"), "-inf", id="-inf"),
    pytest.param(NumpyScalar(0.5), 0.5, id="numpy-float"),
    pytest.param(NumpyScalar(12), 12, id="numpy-int"),
    pytest.param(NumpyScalar(float("nan")), "nan", id="numpy-nan"),
    pytest.param(NumpyScalar(float("inf")), "inf", id="numpy-inf"),
    pytest.param(EagerScalar(0.5), 0.5, id="tensor-float"),
    pytest.param(EagerScalar(float("nan")), "nan", id="tensor-nan"),
    pytest.param(EagerScalar(float("-inf")), "-inf", id="tensor-inf"),
]


@pytest.mark.parametrize(("value", "expected"), METRICS)
def test_metric_values_become_plain_json(value: Any, expected: Any, pipe: tuple[int, int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, write_fd = pipe
    monkeypatch.setenv(env.REPORT_FD, str(write_fd))
    report(5, metric=value)
    (line,) = written(read_fd)
    message = parse(line)
    assert message["step"] == 5
    got = message["metrics"]["metric"]
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, float):
        assert math.isfinite(got)


def test_report_keeps_quiet_once_the_agent_is_gone(pipe: tuple[int, int],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, write_fd = os.pipe()  # a pipe of its own: its read end (the agent) goes away
    try:
        monkeypatch.setenv(env.REPORT_FD, str(write_fd))
        os.close(read_fd)
        report(1, loss=0.5)  # must not raise: training goes on without tfcluster
        assert send({"kind": "progress", "step": 2}) is False
    finally:
        os.close(write_fd)


def test_a_bad_fd_value_is_ignored(pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, _ = pipe
    monkeypatch.setenv(env.REPORT_FD, "not-a-number")
    report(1, loss=0.5)
    assert send({"kind": "progress", "step": 1}) is False
    assert written(read_fd) == []
