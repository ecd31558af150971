"""A tier that cannot run here is skipped on a developer's machine and fails under ``.ci/run``,
which sets the switch: CI cannot go green without every tier having run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tiers import REQUIRE_ENV

ROOT = Path(__file__).resolve().parents[3]
PROBE = ("from tests.support.tiers import require\n\n\n"
         "def test_tier():\n    require(False, 'no such tier here')\n")


def outcome(tmp_path: Path, required: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe_tier.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_ENV}
    if required:
        env[REQUIRE_ENV] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider",
                           "-p", "no:randomly", str(tmp_path / "test_probe_tier.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.timeout(120)
def test_a_missing_tier_skips_here_and_fails_where_every_tier_must_run(tmp_path: Path) -> None:
    skipped = outcome(tmp_path, required=False)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    failed = outcome(tmp_path, required=True)
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout
    assert f"no such tier here; {REQUIRE_ENV}=1 (set by .ci/run)" in failed.stdout


def test_ci_sets_the_switch() -> None:
    assert f"export {REQUIRE_ENV}=1" in (ROOT / ".ci" / "run").read_text()
