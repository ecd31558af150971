"""An output flood from one task never hides another task's crash, and never grows the
coordinator's memory without bound (real processes on this machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.flood import check, flood_entrypoint, watch
from tests.support.jobs import fake_spec, running, write_spec


@pytest.mark.timeout(120)
def test_a_crash_is_acted_on_within_2s_while_another_task_floods_its_output(
        tmp_path: Path) -> None:
    entrypoint, died = flood_entrypoint(tmp_path)
    spec = fake_spec("flood", entrypoint=entrypoint, tasks=[{"type": "worker", "count": 2}])
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run",
                 tmp_path) as job:
        highest = watch(job, died)
        check(job, died, highest)
