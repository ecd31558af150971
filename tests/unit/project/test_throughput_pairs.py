"""``benchmarks/throughput.py``: the helpers' figure compares each round's runs (back to back, the
order reversed every other round), so that a machine slowing down over the series does not count
as a cost of the helpers; a round where one side failed is left out."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def throughput(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The benchmark module, imported from ``benchmarks/`` as the script is, then forgotten."""
    benchmarks = REPO / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    yield importlib.import_module("throughput")
    for name, module in list(sys.modules.items()):  # tfcluster's own modules stay as they are
        if Path(getattr(module, "__file__", None) or "/").parent == benchmarks:
            del sys.modules[name]


def test_a_drifting_machine_is_not_counted_as_the_helpers_cost(throughput: ModuleType) -> None:
    digits, bare = throughput.Results(throughput.DIGITS), throughput.Results(throughput.BARE)
    # every round 1% slower with the helpers, the machine 20% slower each round
    for index, speed in enumerate((150.0, 120.0, 96.0, 77.0)):
        digits.by_round[index], bare.by_round[index] = speed * 0.99, speed
    bare.by_round[1] = 150.0  # this round's digits happened to run in a slow moment
    ratio = throughput.helpers_ratio([digits, bare])
    assert ratio == pytest.approx(0.99)  # the medians of the two series: 106.9 / 123.0 = 0.87
    del bare.by_round[2]  # a failed run: its round is not compared
    assert throughput.paired_ratio(digits, bare) == pytest.approx(0.99)
    table = "\n".join(throughput.table([digits, bare], 2000))
    assert "| 3 | 150.0 [77.0-150.0] | - |" in table  # the base has no ratio to itself
    assert "| 4 |" in table and "0.990x [0.79-0.99] |" in table


def test_every_other_round_runs_the_examples_in_reverse(throughput: ModuleType) -> None:
    results = [throughput.Results(job) for job in throughput.jobs()]
    assert throughput.round_order(results, 0) == results
    assert throughput.round_order(results, 1) == results[::-1]
    assert throughput.round_order(results, 2) == results
