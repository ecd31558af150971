"""``benchmarks/early_kills.py --keep-outliers DIR``: of the warm runs' directories, only those of
runs slower than 1.3 times their moment's median stay (to read where their time went)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
Kept = dict[float, list[tuple[float, Path]]]


@pytest.fixture
def keep_outliers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Kept], None]]:
    """The benchmark's function; its modules (``common``, ``targets``...) imported from
    ``benchmarks/`` as the script does, and forgotten again afterwards."""
    benchmarks = REPO / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    yield importlib.import_module("early_kills").keep_outliers
    for name, module in list(sys.modules.items()):  # tfcluster's own modules stay as they are
        if Path(getattr(module, "__file__", None) or "/").parent == benchmarks:
            del sys.modules[name]


def test_only_the_outliers_are_kept(tmp_path: Path, keep_outliers: Callable[[Kept], None]
                                    ) -> None:
    runs: Kept = {}
    for at_s, recoveries in ((12.0, (1.5, 1.6, 2.4)), (33.0, (2.8,))):
        runs[at_s] = []
        for number, recovery in enumerate(recoveries):
            where = tmp_path / f"at-{at_s:g}s-run-{number + 1}"
            (where / "run").mkdir(parents=True)
            runs[at_s].append((recovery, where))
    keep_outliers(runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["at-12s-run-3"]  # 2.4 > 1.3 x 1.6
